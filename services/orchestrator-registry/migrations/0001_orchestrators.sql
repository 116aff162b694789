-- Registered orchestrators: named instances of a kind (maya's orchprovider registry, persisted).
CREATE TABLE orchestrators (
    name             TEXT    PRIMARY KEY NOT NULL,
    kind             TEXT    NOT NULL CHECK (kind IN ('local', 'docker', 'kubernetes', 'nomad')),
    label            TEXT    NOT NULL DEFAULT '',
    region           TEXT    NOT NULL DEFAULT '',
    -- The kind's config, validated and normalised, as a JSON object.
    config           TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(config)),
    is_default       INTEGER NOT NULL DEFAULT 0 CHECK (is_default IN (0, 1)),
    resource_version INTEGER NOT NULL,
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL
) STRICT;

-- At most one default, enforced by the database itself and not only by the code that switches it.
CREATE UNIQUE INDEX orchestrators_one_default ON orchestrators (is_default) WHERE is_default = 1;

-- Registry-wide counters and flags.
--   resource_version: the last resourceVersion handed out (one sequence for the whole registry, so a
--                     version is never reused, even by a name deregistered and registered again).
--   bootstrapped:     1 once the first start has registered the detected default.
CREATE TABLE registry_meta (
    key   TEXT    PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
) STRICT;

INSERT INTO registry_meta (key, value) VALUES ('resource_version', 0), ('bootstrapped', 0);
