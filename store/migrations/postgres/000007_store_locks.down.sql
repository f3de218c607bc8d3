DROP TABLE store_locks;
