-- read.lua: several reads of one partition, from one instant.
--
-- KEYS[1] partition values (HASH: row key -> value)
-- KEYS[2] partition order  (ZSET: the same row keys, all score 0)
--
-- ARGV[1] the number of reads; then, per read, either
--   'g', n, key1 .. keyn          the values of n rows (n may be 0), or
--   's', lower, upper, limit      a scan, as scan.lua takes it
--
-- Returns one reply per read: for 'g', {value1, ..., valuen} with nil
-- (false) for an absent row; for 's', {more, key1, value1, ...} as scan.lua.
--
-- One script instead of one command per read: an ingest plan needs four
-- reads, and one round trip instead of four is most of its cost.

if #KEYS ~= 2 then
  return redis.error_reply('relay read: expected 2 keys')
end
local reads = tonumber(ARGV[1])
local at = 2
local out = {}
for r = 1, reads do
  local kind = ARGV[at]
  if kind == 'g' then
    local n = tonumber(ARGV[at + 1])
    if n == 0 then
      out[r] = {}
    else
      out[r] = redis.call('HMGET', KEYS[1], unpack(ARGV, at + 2, at + 1 + n))
    end
    at = at + 2 + n
  elseif kind == 's' then
    local limit = tonumber(ARGV[at + 3])
    local keys = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[at + 1], ARGV[at + 2], 'LIMIT', 0, limit + 1)
    local more = 0
    if #keys > limit then
      more = 1
      keys[#keys] = nil
    end
    local page = {more}
    if #keys > 0 then
      local values = redis.call('HMGET', KEYS[1], unpack(keys))
      for i = 1, #keys do
        page[2 * i] = keys[i]
        page[2 * i + 1] = values[i]
      end
    end
    out[r] = page
    at = at + 4
  else
    return redis.error_reply('relay read: unknown read kind')
  end
end
return out
