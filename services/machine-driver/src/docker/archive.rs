//! The one tar shape the Engine's archive API needs here: a single regular file.
//!
//! Files go into a container (and come out of it) through `PUT`/`GET /containers/{id}/archive`, which
//! speak tar. That works on images without a shell or `cat`, where `docker exec` could not write or
//! read anything. The driver only ever moves one small file at a time, so a ustar writer and reader
//! for exactly that shape is all it takes, without a tar dependency.

/// A tar block.
const BLOCK: usize = 512;
/// The longest path a plain ustar `name` field holds.
const MAX_NAME: usize = 100;

/// Why an archive could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    /// The path does not fit a ustar header.
    #[error("path {0:?} is longer than {MAX_NAME} bytes")]
    PathTooLong(String),
}

/// `value` as a NUL-terminated octal field of `width` bytes.
fn octal(field: &mut [u8], value: u64) {
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    field[..width].copy_from_slice(text.as_bytes());
    field[width] = 0;
}

/// A tar archive holding one regular file at `path` (relative, no leading `/`), owned by root, with
/// permission bits `mode`.
pub fn single_file(path: &str, mode: u32, contents: &[u8]) -> Result<Vec<u8>, ArchiveError> {
    let path = path.trim_start_matches('/');
    if path.len() > MAX_NAME {
        return Err(ArchiveError::PathTooLong(path.to_owned()));
    }
    let mut header = [0u8; BLOCK];
    header[..path.len()].copy_from_slice(path.as_bytes());
    octal(&mut header[100..108], u64::from(mode & 0o7777));
    octal(&mut header[108..116], 0); // uid
    octal(&mut header[116..124], 0); // gid
    octal(&mut header[124..136], contents.len() as u64);
    octal(&mut header[136..148], 0); // mtime
    header[156] = b'0';
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    // The checksum is computed with its own field read as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u64 = header.iter().map(|b| u64::from(*b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());

    let padded = contents.len().div_ceil(BLOCK) * BLOCK;
    let mut out = Vec::with_capacity(BLOCK + padded + 2 * BLOCK);
    out.extend_from_slice(&header);
    out.extend_from_slice(contents);
    out.resize(BLOCK + padded, 0);
    out.resize(BLOCK + padded + 2 * BLOCK, 0);
    Ok(out)
}

/// The size field of a header: octal text, or the GNU base-256 form for large sizes.
fn size_of(header: &[u8]) -> Option<usize> {
    let field = &header[124..136];
    if field[0] & 0x80 != 0 {
        let mut n: u64 = 0;
        for b in &field[1..] {
            n = n.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return usize::try_from(n).ok();
    }
    let text = std::str::from_utf8(field).ok()?;
    let digits = text.trim_matches(|c: char| c == '\0' || c == ' ');
    if digits.is_empty() {
        return Some(0);
    }
    usize::from_str_radix(digits, 8).ok()
}

/// The contents of the first regular file in `archive` (the Engine answers a `GET` of one file with
/// an archive of that file, possibly after PAX or GNU extension headers, which are skipped).
pub fn first_file(archive: &[u8]) -> Option<Vec<u8>> {
    let mut at = 0;
    while at + BLOCK <= archive.len() {
        let header = &archive[at..at + BLOCK];
        if header.iter().all(|b| *b == 0) {
            return None;
        }
        let size = size_of(header)?;
        let body = at + BLOCK;
        let end = body.checked_add(size)?;
        match header[156] {
            b'0' | 0 => return archive.get(body..end).map(<[u8]>::to_vec),
            _ => at = body + size.div_ceil(BLOCK) * BLOCK,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_file_reads_back() {
        for contents in [&b""[..], b"x", &[7u8; 512][..], &[9u8; 513][..]] {
            let tar = single_file("/var/lib/berth/user-data", 0o700, contents).unwrap();
            assert_eq!(tar.len() % BLOCK, 0);
            assert_eq!(&tar[..23], b"var/lib/berth/user-data");
            assert_eq!(first_file(&tar).as_deref(), Some(contents));
        }
    }

    #[test]
    fn the_header_checksum_is_what_tar_expects() {
        let tar = single_file("a", 0o644, b"hello").unwrap();
        let mut header = tar[..BLOCK].to_vec();
        let stored =
            usize::from_str_radix(std::str::from_utf8(&header[148..154]).unwrap().trim(), 8)
                .unwrap();
        header[148..156].copy_from_slice(b"        ");
        let sum: usize = header.iter().map(|b| usize::from(*b)).sum();
        assert_eq!(stored, sum);
        assert_eq!(&header[100..108], b"0000644\0");
    }

    #[test]
    fn extension_headers_are_skipped_and_garbage_is_none() {
        let mut pax =
            single_file("PaxHeaders/x", 0o644, b"30 path=var/lib/berth/user-data\n").unwrap();
        pax[156] = b'x';
        pax.truncate(BLOCK * 2);
        pax.extend(single_file("user-data", 0o600, b"data").unwrap());
        assert_eq!(first_file(&pax).as_deref(), Some(&b"data"[..]));
        assert_eq!(first_file(&[0u8; 1024]), None);
        assert_eq!(first_file(b"short"), None);
        let too_long = "d/".repeat(60);
        assert!(single_file(&too_long, 0o600, b"").is_err());
    }
}
