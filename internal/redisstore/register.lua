-- register.lua: sets one partition's registry entry from its rows, as
-- apply.lua does after a batch that writes a registering row. The backfill
-- runs it on partitions written before the registry existed.
--
-- KEYS[1] partition order (ZSET: the partition's row keys, all score 0)
-- KEYS[2] bucket registry (ZSET: registered namespace -> 0)
--
-- ARGV[1] namespace, the partition's member in KEYS[2]
-- ARGV[2] registry tag, one byte: the partition is registered while it
--         holds a row key starting with it
--
-- Returns 1 when the partition is registered, 0 when it is not. It reads
-- the rows and writes the entry in one step, so it can run beside any batch
-- and any number of times.

if #KEYS ~= 2 then
  return redis.error_reply('relay register: expected 2 keys')
end
if #ARGV ~= 2 or #ARGV[2] ~= 1 or ARGV[1] == '' then
  return redis.error_reply('relay register: expected a namespace and a one-byte tag')
end
local tag = ARGV[2]
local b = string.byte(tag)
local upper = '+'
if b < 255 then
  upper = '(' .. string.char(b + 1)
end
local first = redis.call('ZRANGEBYLEX', KEYS[1], '[' .. tag, upper, 'LIMIT', 0, 1)
if #first == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
redis.call('ZADD', KEYS[2], 0, ARGV[1])
return 1
