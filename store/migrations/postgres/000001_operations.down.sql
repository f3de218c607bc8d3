DROP TABLE IF EXISTS operation_events; DROP TABLE IF EXISTS operations;
