-- The machines this controller asked the driver to make, kept while their VM may exist: what the
-- orphan collector may delete is only ever a VM named for one of these whose machine is gone.
CREATE TABLE made_machines (
    namespace  TEXT NOT NULL,
    name       TEXT NOT NULL,
    uid        TEXT NOT NULL,
    class_name TEXT NOT NULL,
    PRIMARY KEY (namespace, name)
) STRICT;
