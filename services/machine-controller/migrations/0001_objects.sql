-- Every stored object of every kind: secrets, machine classes, machines, machine sets, deployments.
-- One table, so one resourceVersion sequence orders every change (what watch resumes from), and a
-- write is one transaction whatever its kind.
CREATE TABLE objects (
    kind             TEXT    NOT NULL CHECK (kind IN ('Secret', 'MachineClass', 'Machine', 'MachineSet', 'MachineDeployment')),
    namespace        TEXT    NOT NULL,
    name             TEXT    NOT NULL,
    uid              TEXT    NOT NULL UNIQUE,
    -- The controlling owner's uid ('' when none): what a set's or deployment's reconcile lists.
    owner_uid        TEXT    NOT NULL DEFAULT '',
    resource_version INTEGER NOT NULL,
    -- The object as answered, without a secret's values.
    body             TEXT    NOT NULL CHECK (json_valid(body)),
    -- A secret's values, sealed (AES-256-GCM): nonce then ciphertext and tag. NULL for other kinds.
    sealed           BLOB,
    -- The id of the key that sealed them.
    key_id           TEXT,
    PRIMARY KEY (kind, namespace, name)
) STRICT;

CREATE INDEX objects_by_owner ON objects (owner_uid) WHERE owner_uid <> '';

-- Controller-wide counters: the last resourceVersion handed out (never reused, even after a delete).
CREATE TABLE controller_meta (
    key   TEXT    PRIMARY KEY NOT NULL,
    value INTEGER NOT NULL
) STRICT;

INSERT INTO controller_meta (key, value) VALUES ('resource_version', 0);

-- What the orphan collector saw: a VM or container carrying this stack's marks that backed no
-- machine, and when it was first and last seen so in a full, successful listing.
CREATE TABLE orphan_sightings (
    provider_id TEXT    PRIMARY KEY NOT NULL,
    namespace   TEXT    NOT NULL,
    class_name  TEXT    NOT NULL,
    machine     TEXT    NOT NULL,
    first_seen  TEXT    NOT NULL,
    sightings   INTEGER NOT NULL
) STRICT;
