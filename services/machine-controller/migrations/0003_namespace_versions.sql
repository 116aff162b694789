-- Each namespace's own resourceVersion sequence. One sequence for every namespace let a tenant
-- list or watch its own namespace to learn how much the others wrote. A namespace's sequence
-- starts above every version issued before it (`controller_meta.resource_version`, no longer
-- advanced, is that floor), so each object's versions still only grow.
CREATE TABLE IF NOT EXISTS namespace_versions (
    namespace TEXT NOT NULL PRIMARY KEY,
    version   INTEGER NOT NULL
);
