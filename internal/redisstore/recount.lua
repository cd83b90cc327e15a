-- recount.lua: a bucket's totals, summed set and flag sets computed afresh
-- from its partitions' rows, all in one step.
--
-- KEYS[1] bucket totals    (HASH, as apply.lua keeps it)
-- KEYS[2] bucket summed    (ZSET)
-- KEYS[3] bucket flag set 1 (ZSET)
-- KEYS[4] bucket flag set 2 (ZSET)
-- KEYS[5] bucket registry  (ZSET)
-- KEYS[6] bucket due index (ZSET)
-- then per partition, in ARGV's order: its values HASH and its order ZSET
--
-- ARGV[1] row tags, three bytes: the sum tag and the two flag tags
-- ARGV[2..] the partitions' namespaces
--
-- Returns {1} recounted; {0, ns} when a namespace in the registry, the due
-- index, the summed set or a flag set is not among ARGV's (one arrived
-- since the caller listed them): nothing written, and the caller lists
-- again. A partition outside them all holds no summed row that counts
-- (its backlog rows count nothing without a timer) and no flag row.
local sbyte, schar = string.byte, string.char
local call = redis.call
local n = #ARGV - 1
if #KEYS ~= 6 + 2 * n or #ARGV[1] ~= 3 then
  return redis.error_reply('relay recount: keys do not match namespaces')
end
local listed = {}
for i = 2, #ARGV do
  listed[ARGV[i]] = true
end
for k = 2, 6 do
  for _, ns in ipairs(call('ZRANGE', KEYS[k], 0, -1)) do
    if not listed[ns] then
      return {0, ns}
    end
  end
end
local sumByte, f1, f2 = sbyte(ARGV[1], 1, 3)
local function range(tb)
  local upper = '+'
  if tb < 255 then
    upper = '(' .. schar(tb + 1)
  end
  return '[' .. schar(tb), upper
end
local function counter(v, k)
  if not v or #v < 1 + 8 * k or (#v - 1) % 8 ~= 0 then
    return 0
  end
  local x, from = 0, 2 + 8 * (k - 1)
  local b1, b2 = sbyte(v, from, from + 1)
  if b1 ~= 0 or b2 >= 32 then
    return 0
  end
  for m = from, from + 7 do
    x = x * 256 + sbyte(v, m)
  end
  return x
end
local s1, s2, c1, c2 = 0, 0, 0, 0
local summed, flagged1, flagged2 = {}, {}, {}
for i = 1, n do
  local ns, rows, order = ARGV[i + 1], KEYS[5 + 2 * i], KEYS[6 + 2 * i]
  local lo, hi = range(sumByte)
  local keys = call('ZRANGEBYLEX', order, lo, hi)
  local r = 0
  if #keys > 0 then
    local vals = call('HMGET', rows, unpack(keys))
    for j = 1, #keys do
      r = r + counter(vals[j], 1)
      s2 = s2 + counter(vals[j], 2)
    end
  end
  s1 = s1 + r
  if r > 0 then
    summed[#summed + 1] = string.format('%.17g', r)
    summed[#summed + 1] = ns
  end
  lo, hi = range(f1)
  if #call('ZRANGEBYLEX', order, lo, hi, 'LIMIT', 0, 1) > 0 then
    c1 = c1 + 1
    flagged1[#flagged1 + 1] = 0
    flagged1[#flagged1 + 1] = ns
  end
  lo, hi = range(f2)
  if #call('ZRANGEBYLEX', order, lo, hi, 'LIMIT', 0, 1) > 0 then
    c2 = c2 + 1
    flagged2[#flagged2 + 1] = 0
    flagged2[#flagged2 + 1] = ns
  end
end
call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
call('HSET', KEYS[1], 'sum1', string.format('%.17g', s1), 'sum2', string.format('%.17g', s2), 'flag1', c1, 'flag2', c2)
-- ZADD takes at most a few thousand pairs comfortably; a bucket holds
-- about namespaces / buckets of them.
local function zaddAll(key, pairs_)
  for from = 1, #pairs_, 2000 do
    call('ZADD', key, unpack(pairs_, from, math.min(from + 1999, #pairs_)))
  end
end
zaddAll(KEYS[2], summed)
zaddAll(KEYS[3], flagged1)
zaddAll(KEYS[4], flagged2)
return {1}
