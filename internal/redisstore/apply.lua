-- apply.lua: one guarded batch on one partition, all or nothing.
--
-- KEYS[1] partition values (HASH: row key -> value)
-- KEYS[2] partition order  (ZSET: the same row keys, all score 0)
-- KEYS[3] bucket due index (ZSET: namespace -> earliest timer due ms)
--
-- ARGV[1] namespace, the partition's member in KEYS[3]
-- ARGV[2] timer tag, one byte: a row key starting with it is a timer whose
--         next 8 bytes are its due ms, big-endian
-- ARGV[3] precondition kinds, one byte each: 'e' equals, 'a' absent
-- ARGV[4] write kinds, one byte each: 'p' put, 'd' delete
-- then a pair per precondition, in order: row key, value ('' for 'a')
-- then a pair per write, in order:        row key, value ('' for 'd')
--
-- Returns {1}    committed;
--         {0, i} precondition i (0-based) was the first to fail, nothing written.
-- Error reply "relay apply: ..." when ARGV is malformed; it is raised before
-- any key is read or written.
--
-- Redis keeps a failed script's earlier writes, so every check comes first:
-- the shape, then every precondition, and only then the writes. The kinds
-- travel as two strings rather than an argument per operation: fewer
-- arguments is measurably faster at this script's call rate.

if #KEYS ~= 3 then
  return redis.error_reply('relay apply: expected 3 keys')
end
local pkinds, wkinds = ARGV[3], ARGV[4]
local np, nw = #pkinds, #wkinds
if np + nw > 100 then
  return redis.error_reply('relay apply: batch exceeds 100 operations')
end
if #ARGV ~= 4 + 2 * (np + nw) then
  return redis.error_reply('relay apply: argument count does not match operation counts')
end
local tag = ARGV[2]
if #tag ~= 1 then
  return redis.error_reply('relay apply: timer tag must be one byte')
end
local tagByte = string.byte(tag)
local E, P = string.byte('e'), string.byte('p')
-- Calls into C cost more than the Lua around them at this call rate, so the
-- kinds are checked by one pattern each and read as bytes in one call each.
if string.find(pkinds, '[^ea]') then
  return redis.error_reply('relay apply: malformed precondition')
end
if string.find(wkinds, '[^pd]') then
  return redis.error_reply('relay apply: malformed write')
end
local pk = {string.byte(pkinds, 1, np)}
local wk = {string.byte(wkinds, 1, nw)}

-- ARGV index of the first pair of each section.
local pc0 = 5
local w0 = 5 + 2 * np

local fields = {}
for i = 1, np do
  local key = ARGV[pc0 + 2 * (i - 1)]
  if key == '' then
    return redis.error_reply('relay apply: malformed precondition')
  end
  fields[i] = key
end
local timers = false
for i = 1, nw do
  local key = ARGV[w0 + 2 * (i - 1)]
  if key == '' then
    return redis.error_reply('relay apply: malformed write')
  end
  if string.byte(key) == tagByte then
    if wk[i] == P and #key < 11 then
      return redis.error_reply('relay apply: timer key lacks its due time and kind')
    end
    timers = true
  end
end

if np > 0 then
  local current = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, np do
    local v = current[i]
    if pk[i] == E then
      if v ~= ARGV[pc0 + 2 * (i - 1) + 1] then
        return {0, i - 1}
      end
    elseif v then
      return {0, i - 1}
    end
  end
end

-- Only a key's last write matters, so the writes collapse into one HSET and
-- one ZADD of the rows put, then one HDEL and one ZREM of the rows deleted:
-- four commands at most, whatever the batch size. A ZADD of a key already in
-- the order set and a ZREM of one never in it change nothing. Puts go first:
-- on a Redis that runs scripts without flags, a full memory refuses the
-- first growing command, and then nothing has been written yet.
local last = {}
for i = 1, nw do
  last[ARGV[w0 + 2 * (i - 1)]] = i
end
local hset, zadd, dels = {}, {}, {}
for i = 1, nw do
  local j = w0 + 2 * (i - 1)
  local key = ARGV[j]
  if last[key] == i then
    if wk[i] == P then
      hset[#hset + 1] = key
      hset[#hset + 1] = ARGV[j + 1]
      zadd[#zadd + 1] = '0'
      zadd[#zadd + 1] = key
    else
      dels[#dels + 1] = key
    end
  end
end
if #hset > 0 then
  redis.call('HSET', KEYS[1], unpack(hset))
  redis.call('ZADD', KEYS[2], unpack(zadd))
end
if #dels > 0 then
  redis.call('HDEL', KEYS[1], unpack(dels))
  redis.call('ZREM', KEYS[2], unpack(dels))
end

if timers then
  local upper = '+'
  if tagByte < 255 then
    upper = '(' .. string.char(tagByte + 1)
  end
  local first = redis.call('ZRANGEBYLEX', KEYS[2], '[' .. tag, upper, 'LIMIT', 0, 1)
  if #first == 0 then
    redis.call('ZREM', KEYS[3], ARGV[1])
  else
    -- A timer key too short to carry a due time counts as due now; this
    -- script refuses to put one, so only a foreign writer can cause it.
    local due = 0
    local key = first[1]
    if #key >= 9 then
      for i = 2, 9 do
        due = due * 256 + string.byte(key, i)
      end
    end
    redis.call('ZADD', KEYS[3], string.format('%.17g', due), ARGV[1])
  end
end

return {1}
