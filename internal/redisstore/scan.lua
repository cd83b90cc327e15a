-- scan.lua: one page of a partition's rows in byte order.
--
-- KEYS[1] partition values (HASH: row key -> value)
-- KEYS[2] partition order  (ZSET: the same row keys, all score 0)
--
-- ARGV[1] lower bound in ZRANGEBYLEX form: '[' .. start, or '(' .. cursor key
-- ARGV[2] upper bound in ZRANGEBYLEX form: '(' .. end
-- ARGV[3] limit, rows to return (1 or more); one more is read to learn
--         whether the range holds more
--
-- Returns {more, key1, value1, key2, value2, ...}: more is 1 when the range
-- holds a key after the last one returned, else 0. A value is nil (false)
-- only if the two structures disagree, which the caller reports as corrupt.
--
-- A script, not two commands, so the keys and values come from one instant.

if #KEYS ~= 2 then
  return redis.error_reply('relay scan: expected 2 keys')
end
local limit = tonumber(ARGV[3])
local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[1], ARGV[2], 'LIMIT', 0, limit + 1)
local more = 0
if #keys > limit then
  more = 1
  keys[#keys] = nil
end
local out = {more}
if #keys == 0 then
  return out
end
local values = redis.call('HMGET', KEYS[1], unpack(keys))
for i = 1, #keys do
  out[2 * i] = keys[i]
  out[2 * i + 1] = values[i]
end
return out
