-- 0002_hash_tags: keys ready for Redis Cluster, and room for the semantic cache.
--   pc:2:e:{<tenant>:<key>}  one cached answer (binary entry, src/entry.c), with a TTL;
--                            the braces are its hash tag, shared with its vector
--   pc:2:v:{<tenant>:<key>}  the entry's vector record (semantic cache), same TTL
--   pc:2:vs                  stream of vector inserts/deletes/flushes (instances in step)
--   pc:2:r:<YYYYMMDDHH>      hourly usage counters for `promptcache report`
-- Schema 1 keys are renamed in place (RENAME keeps a key's TTL): cached answers
-- and report counters survive the upgrade. One pass of SCAN inside this script:
-- Redis is busy for about a second per million keys while it runs. (Schema 1
-- never ran on a Redis Cluster, whose nodes would refuse a RENAME across
-- slots; there the SCAN finds nothing.) The count of keys moved goes to pc:meta.
local moved = 0
local cursor = '0'
repeat
    local r = redis.call('SCAN', cursor, 'MATCH', 'pc:1:*', 'COUNT', 1000)
    cursor = r[1]
    for _, k in ipairs(r[2]) do
        local kind, rest = string.match(k, '^pc:1:(%a):(.*)$')
        local to = nil
        if kind == 'e' then
            local tenant, key = string.match(rest, '^([^:]+):([^:]+)$')
            if tenant then
                to = 'pc:2:e:{' .. tenant .. ':' .. key .. '}'
            end
        elseif kind == 'r' then
            to = 'pc:2:r:' .. rest
        end
        if to and redis.call('EXISTS', k) == 1 then
            redis.call('RENAME', k, to)
            moved = moved + 1
        end
    end
until cursor == '0'
return {'migrated_0002_keys', tostring(moved)}
