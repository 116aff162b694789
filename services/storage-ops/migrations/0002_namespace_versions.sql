-- Each namespace's own resourceVersion sequence. One sequence for every namespace let a tenant
-- watch it to learn how much the others wrote. A namespace's sequence starts above every version
-- issued before it (`meta.resource_version`, no longer advanced, is that floor), so each volume's
-- versions still only grow, across deletes and re-creates too.
CREATE TABLE IF NOT EXISTS namespace_versions (
    namespace TEXT NOT NULL PRIMARY KEY,
    version   INTEGER NOT NULL
);
