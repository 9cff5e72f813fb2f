-- 0001_initial: the first schema.
--   pc:schema              schema version (this migration sets it to 1)
--   pc:meta                hash: when the schema was created / last migrated (written by
--                          the applier from the script's reply: a cluster keeps it on
--                          another node than pc:schema)
--   pc:1:e:<tenant>:<key>  one cached answer (binary entry, see src/entry.c), with a TTL
--   pc:1:r:<YYYYMMDDHH>    hourly usage counters for `promptcache report` (src/tally.c)
-- Nothing to convert: a store without pc:schema holds no promptcache data.
return {'created_at', ARGV[3]}
