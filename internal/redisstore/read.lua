-- read.lua: several reads of one partition, from one instant.
--
-- KEYS[1] partition values (HASH: row key -> value)
-- KEYS[2] partition order  (ZSET: the row keys, all score 0; see below)
--
-- ARGV[1] the block tag, one byte (see below)
-- ARGV[2] the number of reads; then, per read, either
--   'g', n, key1 .. keyn          the values of n rows (n may be 0), or
--   's', lower, upper, limit      a scan: rows in ZRANGEBYLEX bounds lower
--                                 ('[' .. start, or '(' .. cursor key) and
--                                 upper ('(' .. end), at most limit (1 or
--                                 more) of them
--
-- Returns one reply per read: for 'g', {value1, ..., valuen} with nil
-- (false) for an absent row; for 's', {more, key1, value1, ...} in byte
-- order, more being 1 when the range holds a row after the last returned.
-- A scanned value is nil only if the order set names a row the values
-- lack, which the caller reports as corrupt.
--
-- A row key of 9 bytes starting with the block tag is a blocked row: the
-- order set holds not its key but its block's, the key with the low six
-- bits of its last byte cleared, one entry for up to 64 rows. A scan reads
-- a block's 64 keys and keeps the rows there, so such a key's entry is
-- never missing a value.
--
-- One script instead of one command per read: an ingest plan needs four
-- reads, and one round trip instead of four is most of its cost.

if #KEYS ~= 2 then
  return redis.error_reply('relay read: expected 2 keys')
end
if #ARGV[1] ~= 1 then
  return redis.error_reply('relay read: the block tag must be one byte')
end
local blockByte = string.byte(ARGV[1])

local function blocked(k)
  return #k == 9 and string.byte(k, 1) == blockByte
end

-- blockOf is the block entry of a blocked key.
local function blockOf(k)
  local last = string.byte(k, 9)
  return string.sub(k, 1, 8) .. string.char(last - last % 64)
end

-- below reports a < b in byte order, whatever the server's collation.
local function below(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- scan is one page of rows in [lower, upper) in ZRANGEBYLEX form.
local function scan(lower, upper, limit)
  local lowKey, inclusive = string.sub(lower, 2), string.sub(lower, 1, 1) == '['
  local highKey = string.sub(upper, 2)
  local from = lower
  if #lowKey >= 9 and string.byte(lowKey, 1) == blockByte then
    -- The block of the lower bound may hold rows after it.
    from = '[' .. blockOf(string.sub(lowKey, 1, 9))
  end
  local inRange = function(k)
    if below(k, lowKey) or (k == lowKey and not inclusive) then
      return false
    end
    return below(k, highKey)
  end
  local keys, vals = {}, {}
  local lastBlock = nil
  while #keys <= limit do
    local members = redis.call('ZRANGEBYLEX', KEYS[2], from, upper, 'LIMIT', 0, limit + 1)
    if #members == 0 then
      break
    end
    local plain = {}
    local function flush()
      if #plain == 0 then
        return
      end
      local got = redis.call('HMGET', KEYS[1], unpack(plain))
      for i = 1, #plain do
        if #keys <= limit then
          keys[#keys + 1], vals[#vals + 1] = plain[i], got[i]
        end
      end
      plain = {}
    end
    for _, m in ipairs(members) do
      if #keys > limit then
        break
      end
      if blocked(m) then
        local b = blockOf(m)
        if b ~= lastBlock then
          lastBlock = b
          flush()
          -- The block's keys within the bounds, read a few at a time
          -- until the page is full.
          local prefix, base = string.sub(b, 1, 8), string.byte(b, 9)
          local i = 0
          if string.sub(lowKey, 1, 8) == prefix and #lowKey >= 9 and blockOf(string.sub(lowKey, 1, 9)) == b then
            i = string.byte(lowKey, 9) - base
          end
          while i < 64 and #keys <= limit do
            local cand = {}
            for j = i, math.min(i + math.max(limit - #keys, 15), 63) do
              local k = prefix .. string.char(base + j)
              if not below(k, highKey) then
                -- Past the upper bound: nothing further is in range.
                i = 64
                break
              end
              cand[#cand + 1] = k
            end
            if #cand == 0 then
              break
            end
            i = i + #cand
            local got = redis.call('HMGET', KEYS[1], unpack(cand))
            for j = 1, #cand do
              if got[j] and inRange(cand[j]) and #keys <= limit then
                keys[#keys + 1], vals[#vals + 1] = cand[j], got[j]
              end
            end
          end
        end
      else
        plain[#plain + 1] = m
      end
    end
    flush()
    if #members <= limit then
      break
    end
    from = '(' .. members[#members]
  end
  local more = 0
  if #keys > limit then
    more = 1
    keys[#keys], vals[#vals] = nil, nil
  end
  local page = {more}
  for i = 1, #keys do
    page[2 * i] = keys[i]
    page[2 * i + 1] = vals[i]
  end
  return page
end

local reads = tonumber(ARGV[2])
local at = 3
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
    out[r] = scan(ARGV[at + 1], ARGV[at + 2], tonumber(ARGV[at + 3]))
    at = at + 4
  else
    return redis.error_reply('relay read: unknown read kind')
  end
end
return out
