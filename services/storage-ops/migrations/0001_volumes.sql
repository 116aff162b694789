-- Volumes, keyed by (namespace, name), with the spec they were made from and where they are in their life.
CREATE TABLE volumes (
    uid              TEXT    NOT NULL UNIQUE,
    namespace        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    -- The orchestrator it was made on, and that orchestrator's kind and config at the time: the backend
    -- object lives where it was made even if the registration changes later.
    orchestrator     TEXT    NOT NULL,
    kind             TEXT    NOT NULL CHECK (kind IN ('local', 'docker', 'kubernetes', 'nomad')),
    backend_config   TEXT    NOT NULL,
    capacity         TEXT    NOT NULL,
    capacity_bytes   INTEGER NOT NULL CHECK (capacity_bytes > 0),
    replicas         INTEGER NOT NULL CHECK (replicas >= 1),
    labels           TEXT    NOT NULL,
    parameters       TEXT    NOT NULL,
    spec_hash        TEXT    NOT NULL,
    phase            TEXT    NOT NULL CHECK (phase IN ('Pending', 'Provisioning', 'Ready', 'Failed', 'Deleting')),
    reason           TEXT    NOT NULL DEFAULT '',
    message          TEXT    NOT NULL DEFAULT '',
    location         TEXT    NOT NULL DEFAULT '',
    created_at       TEXT    NOT NULL,
    updated_at       TEXT    NOT NULL,
    resource_version INTEGER NOT NULL
);

-- The key, and the order ListStorage pages in: a page is one index range scan, whatever the table size.
CREATE UNIQUE INDEX volumes_by_key ON volumes (namespace, name);
-- The reconciler's work list: only the rows it has to finish, so a pass costs nothing when all is well.
CREATE INDEX volumes_unfinished ON volumes (phase) WHERE phase IN ('Pending', 'Provisioning', 'Deleting');
-- Capacity accounting per orchestrator (a covering index: the sum never touches the table).
CREATE INDEX volumes_by_orchestrator ON volumes (orchestrator, phase, capacity_bytes);

-- Backend objects kept on purpose by a `Retain` delete: not volumes any more, but not orphans either.
CREATE TABLE retained (
    uid          TEXT NOT NULL PRIMARY KEY,
    namespace    TEXT NOT NULL,
    name         TEXT NOT NULL,
    orchestrator TEXT NOT NULL,
    kind         TEXT NOT NULL,
    location     TEXT NOT NULL,
    released_at  TEXT NOT NULL
);

-- Counters and identity: `resource_version` (monotonic across restarts and deletes) and `instance`
-- (this database's id, which labels its Docker volumes so two Berths on one Engine never claim each
-- other's volumes as orphans).
CREATE TABLE meta (
    key   TEXT NOT NULL PRIMARY KEY,
    value TEXT NOT NULL
);
INSERT INTO meta (key, value) VALUES ('resource_version', '0');
