//! The tokens file of a data directory, as `berth up`'s gateway serves it. Its format belongs to the
//! gateway, which also writes it (its first start in a container, `gateway token create`); `berth
//! up` and `berth token` use the same readers and writers, through here.

use std::path::{Path, PathBuf};

pub use gateway::auth::{
    LineFields, TOKENS_FILE_HEADER as HEADER, append_token_line as append_line,
    create_tokens_file as create_file, grant_rule, new_token, parse_token_lines, read_last_used,
    revoke_token, tokens_file_line_with, valid_token_name,
};
pub use gateway::routes::Scope;
pub use service_kit::tenancy::Namespaces;

/// The tokens file inside a data directory, as `berth up` serves it.
pub fn tokens_file_in(data_dir: &Path) -> PathBuf {
    data_dir.join("tokens")
}
