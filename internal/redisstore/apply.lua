-- apply.lua: one guarded batch on one partition, all or nothing.
--
-- KEYS[1] partition values (HASH: row key -> value)
-- KEYS[2] partition order  (ZSET: the same row keys, all score 0)
-- KEYS[3] bucket due index (ZSET: namespace -> earliest timer due ms)
-- KEYS[4] bucket registry  (ZSET: registered namespace -> 0)
-- KEYS[5] bucket totals    (HASH: 'sum1', 'sum2' the sums of the summed rows'
--         first two counters; 'flag1', 'flag2' the sizes of KEYS[7], KEYS[8])
-- KEYS[6] bucket summed    (ZSET: namespace -> its summed rows' first counter,
--         present while above 0)
-- KEYS[7] bucket flag set 1 (ZSET: flagged namespace -> 0)
-- KEYS[8] bucket flag set 2 (ZSET: flagged namespace -> 0)
--
-- ARGV[1] namespace, the partition's member in KEYS[3] and KEYS[4]
-- ARGV[2] row tags, seven bytes. The first is the timer tag: a row key
--         starting with it is a timer whose next 8 bytes are its due ms,
--         big-endian. The second is the registry tag: the partition is in
--         KEYS[4] while it holds a row key starting with it. The third is
--         the unordered tag: a row key starting with it is kept in KEYS[1]
--         alone, never added to KEYS[2]. The fourth is the block tag: a
--         row key of 9 bytes starting with it is ordered by its block's
--         entry in KEYS[2], the key with the low six bits of its last byte
--         cleared, present while any of the block's 64 rows is (read.lua
--         reads blocks). The fifth is the sum tag: the change of a
--         row starting with it (one header byte, then 8-byte counters; any
--         other layout, or none, and a counter of 2^53 or more, counts
--         as zeros) is added to KEYS[5] and
--         KEYS[6]. The sixth and seventh are the flag tags: the partition
--         is in KEYS[7] (KEYS[8]) while it holds a row key starting with
--         the sixth (seventh), and KEYS[5] counts the members.
-- ARGV[3] precondition kinds, one byte each: 'e' equals, 'a' absent,
--         'r' range equals
-- ARGV[4] write kinds, one byte each: 'p' put, 'd' delete, 'c' counter add,
--         'r' put-range
-- then a pair per precondition, in order: row key, value ('' for 'a')
-- then a pair per write, in order:        row key, value ('' for 'd')
-- then, when rows are to be read once the writes are applied, their
--         count (1 to 64, in decimal) and their row keys
--
-- A counter add's value is: header length h (one byte), the h header bytes,
-- then per counter a sign and the delta's magnitude, 7 bytes big-endian,
-- below 2^53. The sign is '+' (add), '-' (subtract; below 0 refuses the
-- batch) or '~' (subtract, stopping at 0: a gauge). It adds each delta to
-- the row's counters: the row is the header and one 8-byte big-endian
-- counter per delta, and an absent row counts as the header and zeros. An
-- added row takes no other write in the batch and is not a timer.
--
-- A range-equals precondition's value is laid out as a put-range's: it
-- holds when the row exists and has those bytes at that offset, whatever
-- the rest of the row holds.
--
-- A put-range's value is: the offset, 4 bytes big-endian, then the 1 to 256
-- bytes it writes there. It overwrites those bytes of the row as it stands,
-- so the row's length never changes; several put-ranges of one row apply in
-- order. Its row takes no put, delete or counter add in the batch, and is
-- neither a timer nor a registering row, whose keys the indexes follow.
--
-- Returns {1}    committed, with no row keys to read;
--         {1, rows} committed, rows holding each row key's value (nil when
--                 absent) as the batch left it;
--         {0, i} precondition i (0-based) was the first to fail, nothing written.
-- Error reply "relay apply: ..." when ARGV is malformed; it is raised before
-- any key is read or written. Once every precondition holds, an add whose
-- row has another layout raises "relay apply: counter row has another
-- layout", and one that would take a counter below 0 (but for a '~') or
-- to 2^53 or more (or finds one there) "relay apply: counter out of range",
-- and a put-range whose row is absent or shorter than its end "relay
-- apply: put-range row is absent or too short", also before any write.
--
-- Redis keeps a failed script's earlier writes, so every check comes first:
-- the shape, then every precondition, and only then the writes. The kinds
-- travel as two strings rather than an argument per operation: fewer
-- arguments is measurably faster at this script's call rate.

-- Globals are table lookups in Lua, and these are read once or more per
-- operation: locals are measurably cheaper at this script's call rate.
local argv = ARGV
local sbyte, ssub, schar, sfind, srep = string.byte, string.sub, string.char, string.find, string.rep
local call, unpack = redis.call, unpack

if #KEYS ~= 8 then
  return redis.error_reply('relay apply: expected 8 keys')
end
local pkinds, wkinds = argv[3], argv[4]
local np, nw = #pkinds, #wkinds
if np + nw > 256 then
  return redis.error_reply('relay apply: batch exceeds 256 operations')
end
-- Reads, when any, follow the write pairs as their count, then the keys:
-- the count keeps a stray argument from reading as a read.
local r0, nr = 5 + 2 * (np + nw), 0
if #argv > r0 - 1 then
  nr = tonumber(argv[r0])
  if not nr or nr < 1 or nr > 64 or nr % 1 ~= 0 or tostring(nr) ~= argv[r0] then
    return redis.error_reply('relay apply: argument count does not match operation counts')
  end
  r0 = r0 + 1
end
if #argv ~= r0 - 1 + nr then
  return redis.error_reply('relay apply: argument count does not match operation counts')
end
for i = r0, #argv do
  if argv[i] == '' then
    return redis.error_reply('relay apply: malformed read')
  end
end
if #argv[2] ~= 7 then
  return redis.error_reply('relay apply: row tags must be seven bytes')
end
local tag, regTag = ssub(argv[2], 1, 1), ssub(argv[2], 2, 2)
local tagByte, regByte, unorderedByte, blockByte, sumByte, flagByte1, flagByte2 = sbyte(argv[2], 1, 7)
local E, P, C, R, D = 101, 112, 99, 114, 100 -- 'e', 'p', 'c', 'r', 'd'
-- Calls into C cost more than the Lua around them at this call rate, so the
-- kinds are checked by one pattern each and read as bytes in one call each.
if sfind(pkinds, '[^ear]') then
  return redis.error_reply('relay apply: malformed precondition')
end
if sfind(wkinds, '[^pdcr]') then
  return redis.error_reply('relay apply: malformed write')
end
local pk = {sbyte(pkinds, 1, np)}
local wk = {sbyte(wkinds, 1, nw)}

-- range is the offset and bytes of a put-range's or range guard's value,
-- nil when malformed: 1 to 256 bytes ending within a row's 4 MiB.
local function range(v)
  if #v < 5 or #v > 4 + 256 then
    return nil
  end
  local o1, o2, o3, o4 = sbyte(v, 1, 4)
  local offset = ((o1 * 256 + o2) * 256 + o3) * 256 + o4
  if offset + #v - 4 > 4194304 then
    return nil
  end
  return offset, ssub(v, 5)
end

-- ARGV index of the first pair of each section.
local pc0 = 5
local w0 = 5 + 2 * np

local fields = {}
-- pranges[i] = {offset, bytes} of a range-equals precondition i.
local pranges = {}
for i = 1, np do
  local key = argv[pc0 + 2 * (i - 1)]
  if key == '' then
    return redis.error_reply('relay apply: malformed precondition')
  end
  fields[i] = key
  if pk[i] == R then
    local b = sbyte(key)
    local offset, bytes = range(argv[pc0 + 2 * (i - 1) + 1])
    if b == tagByte or b == regByte or not offset then
      return redis.error_reply('relay apply: malformed precondition')
    end
    pranges[i] = {offset, bytes}
  end
end
local registry, flagged1, flagged2, summed = false, false, false, false
-- adds[j] = {key, header, deltas, floors} of the j-th counter add, floors[k]
-- true for a counter that stops at 0; writes counts the writes of each key,
-- so an added key is known to have no other, and last names each key's last
-- write, the only one that matters. ranges[j] = {key, offset, bytes} of the
-- j-th put-range; whole[key] is set for a key with a write of another kind,
-- which a ranged key may not have.
local adds, writes, last, ranges, whole = {}, {}, {}, {}, {}
for i = 1, nw do
  local at = w0 + 2 * (i - 1)
  local key = argv[at]
  if key == '' then
    return redis.error_reply('relay apply: malformed write')
  end
  local kind, b = wk[i], sbyte(key)
  writes[key] = (writes[key] or 0) + 1
  last[key] = i
  if kind == R then
    if b == tagByte or b == regByte then
      return redis.error_reply('relay apply: put-range of a timer or registering row')
    end
    local offset, bytes = range(argv[at + 1])
    if not offset then
      return redis.error_reply('relay apply: malformed put-range')
    end
    ranges[#ranges + 1] = {key, offset, bytes}
  else
    whole[key] = true
  end
  if b == regByte then
    registry = true
  elseif b == flagByte1 then
    flagged1 = true
  elseif b == flagByte2 then
    flagged2 = true
  elseif b == sumByte then
    summed = true
  end
  if b == tagByte then
    if kind == C then
      return redis.error_reply('relay apply: counter add to a timer row')
    end
    if kind == P and #key < 11 then
      return redis.error_reply('relay apply: timer key lacks its due time and kind')
    end
  end
  if kind == C then
    local v = argv[at + 1]
    local h = sbyte(v) or -1
    local body = #v - 1 - h
    if h < 0 or h > 16 or body < 8 or body > 64 or body % 8 ~= 0 then
      return redis.error_reply('relay apply: malformed counter add')
    end
    local deltas, floors = {}, {}
    for j = 0, body / 8 - 1 do
      local from = 2 + h + 8 * j
      local sign, top = sbyte(v, from, from + 1)
      if (sign ~= 43 and sign ~= 45 and sign ~= 126) or top >= 32 then
        return redis.error_reply('relay apply: malformed counter add')
      end
      local d = 0
      for k = from + 1, from + 7 do
        d = d * 256 + sbyte(v, k)
      end
      if sign ~= 43 then
        d = -d
      end
      deltas[j + 1] = d
      floors[j + 1] = sign == 126
    end
    adds[#adds + 1] = {key, ssub(v, 2, 1 + h), deltas, floors}
  end
end
for j = 1, #adds do
  if writes[adds[j][1]] ~= 1 then
    return redis.error_reply('relay apply: an added row takes no other write')
  end
end
for j = 1, #ranges do
  if whole[ranges[j][1]] then
    return redis.error_reply('relay apply: a put-range row takes no other write')
  end
end

-- Every row the batch reads (each guarded, added or spliced row, and each
-- row to read after the writes that it does not write) is read in one
-- HMGET, before any write, whatever kinds the batch holds: stood[at[key]]
-- is the row as it stands, false when absent.
local rkeys, at = {}, {}
local function readFirst(key)
  if not at[key] then
    rkeys[#rkeys + 1] = key
    at[key] = #rkeys
  end
end
for i = 1, np do
  readFirst(fields[i])
end
for j = 1, #adds do
  readFirst(adds[j][1])
end
for j = 1, #ranges do
  readFirst(ranges[j][1])
end
-- A row to read after the writes that the batch does not write is read
-- now with the rest: the writes leave it as it stands.
for i = r0, #argv do
  if last[argv[i]] == nil then
    readFirst(argv[i])
  end
end
-- So is each row the batch puts or deletes but a timer, a blocked or an
-- unordered one: a row that stands has its order entry already (every
-- write that created it added the entry), so its put needs no ZADD, and a
-- row that does not stand needs no HDEL or ZREM. A timer's key is new with
-- each due time (one rewritten in place is guarded, and so read), and a
-- blocked row is mostly a new log row.
for i = 1, nw do
  local kind = wk[i]
  if kind == P or kind == D then
    local key = argv[w0 + 2 * (i - 1)]
    local b = sbyte(key)
    if b ~= tagByte and b ~= unorderedByte and not (b == blockByte and #key == 9) then
      readFirst(key)
    end
  end
end
local stood = {}
if #rkeys > 0 then
  stood = call('HMGET', KEYS[1], unpack(rkeys))
end

if np > 0 then
  for i = 1, np do
    local v, kind = stood[at[fields[i]]], pk[i]
    if kind == E then
      if v ~= argv[pc0 + 2 * (i - 1) + 1] then
        return {0, i - 1}
      end
    elseif kind == R then
      local offset, want = pranges[i][1], pranges[i][2]
      if not v or ssub(v, offset + 1, offset + #want) ~= want then
        return {0, i - 1}
      end
    elseif v then
      return {0, i - 1}
    end
  end
end

-- added[key] is the new value of a row an add or a put-range writes.
-- Every add is computed before the first write: a row of another layout,
-- or a counter leaving 0..2^53-1 (a saturating one taken below 0 is 0
-- instead), refuses the whole batch. Counters below 2^53 are exact in
-- Lua's doubles.
local added = {}
if #adds > 0 then
  for j = 1, #adds do
    local header, deltas, floors = adds[j][2], adds[j][3], adds[j][4]
    local v = stood[at[adds[j][1]]]
    if not v then
      v = header .. srep('\0', 8 * #deltas)
    elseif #v ~= #header + 8 * #deltas or ssub(v, 1, #header) ~= header then
      return redis.error_reply('relay apply: counter row has another layout')
    end
    local out = {header}
    for k = 1, #deltas do
      local at = #header + 8 * (k - 1) + 1
      local b1, b2 = sbyte(v, at, at + 1)
      if b1 ~= 0 or b2 >= 32 then
        return redis.error_reply('relay apply: counter out of range')
      end
      local n = 0
      for m = at, at + 7 do
        n = n * 256 + sbyte(v, m)
      end
      n = n + deltas[k]
      if n < 0 and floors[k] then
        n = 0
      end
      if n < 0 or n > 9007199254740991 then
        return redis.error_reply('relay apply: counter out of range')
      end
      local bytes = {}
      for m = 8, 1, -1 do
        local b = n % 256
        bytes[m] = b
        n = (n - b) / 256
      end
      out[k + 1] = schar(unpack(bytes))
    end
    added[adds[j][1]] = table.concat(out)
  end
end

-- Every put-range is spliced before the first write too, into the row as it
-- stands, in batch order, so a concurrent writer of other bytes of the row
-- does not fail it. A row absent or too short refuses the whole batch.
if #ranges > 0 then
  for j = 1, #ranges do
    local key, offset, bytes = ranges[j][1], ranges[j][2], ranges[j][3]
    local v = added[key] or stood[at[key]]
    if not v or #v < offset + #bytes then
      return redis.error_reply('relay apply: put-range row is absent or too short')
    end
    added[key] = ssub(v, 1, offset) .. bytes .. ssub(v, offset + #bytes + 1)
  end
end

-- Only a key's last write matters, so the writes collapse into one HSET and
-- one ZADD of the rows put, then one HDEL and one ZREM of the rows deleted:
-- four commands at most, whatever the batch size, and no ZADD when every
-- row put stood before. A ZADD of a key already in the order set and a ZREM
-- of one never in it change nothing: an unordered row is never added, and
-- its delete also removes the order entry a row put before the store kept
-- the class unordered may have. Puts go first:
-- on a Redis that runs scripts without flags, a full memory refuses the
-- first growing command, and then nothing has been written yet.
local hset, zadd, dels, zrem = {}, {}, {}, {}
-- putDue is the earliest due time of the timers the batch leaves put that
-- did not stand, and delDue of those it leaves deleted (only a key's last
-- write counts): a batch that deletes none due before putDue (it only
-- puts, or moves timers no later than it puts) needs no read of the rows
-- to place its partition in the due index, and one that only rewrites
-- timers in place (their keys, so their due times, unchanged) leaves the
-- entry as it is. A key too short to carry a due time counts as due at 0.
local putDue, delDue = nil, nil
local function dueOf(key)
  local due = 0
  if #key >= 9 then
    for k = 2, 9 do
      due = due * 256 + sbyte(key, k)
    end
  end
  return due
end
-- left[key] is a written row as the batch leaves it, false when deleted:
-- with the rows read before the writes, what the reads after them return.
local left = {}
-- ordered marks an entry already in zadd: a block's rows put together add
-- its entry once.
local ordered = {}
-- emptied[b] is the last of a block's rows the batch deletes, in the
-- block's order: the block may be empty now.
local emptied, blocks = {}, {}
for i = 1, nw do
  local j = w0 + 2 * (i - 1)
  local key = argv[j]
  if last[key] == i then
    -- A blocked key is 9 bytes starting with the block tag; b is its
    -- block's entry, the key with the low six bits of its last byte cleared.
    local first, b, lastByte = sbyte(key), nil, nil
    if #key == 9 and first == blockByte then
      lastByte = sbyte(key, 9)
      b = ssub(key, 1, 8) .. schar(lastByte - lastByte % 64)
    end
    local kind = wk[i]
    if first == tagByte then
      local due = dueOf(key)
      if kind == P then
        if not (at[key] and stood[at[key]]) and (not putDue or due < putDue) then
          putDue = due
        end
      elseif not delDue or due < delDue then
        delDue = due
      end
    end
    if kind == P or kind == C or kind == R then
      local v = added[key] or argv[j + 1]
      left[key] = v
      hset[#hset + 1] = key
      hset[#hset + 1] = v
      local entry = b or key
      -- A row that stood has its entry already.
      local stands = at[key] and stood[at[key]]
      if first ~= unorderedByte and not stands and not ordered[entry] then
        ordered[entry] = true
        zadd[#zadd + 1] = '0'
        zadd[#zadd + 1] = entry
      end
    elseif at[key] and not stood[at[key]] then
      -- Deleting a row that did not stand changes nothing.
      left[key] = false
    else
      left[key] = false
      dels[#dels + 1] = key
      if b then
        local pos = lastByte % 64
        local was = emptied[b]
        if was == nil then
          blocks[#blocks + 1] = b
          emptied[b] = pos
        elseif pos > was then
          emptied[b] = pos
        end
      elseif first ~= unorderedByte then
        zrem[#zrem + 1] = key
      end
    end
  end
end
if #hset > 0 then
  call('HSET', KEYS[1], unpack(hset))
end
if #zadd > 0 then
  call('ZADD', KEYS[2], unpack(zadd))
end
if #dels > 0 then
  call('HDEL', KEYS[1], unpack(dels))
  if #zrem > 0 then
    call('ZREM', KEYS[2], unpack(zrem))
  end
end
-- A block keeps its entry while any of its 64 rows is left, and loses it
-- with the last. Only a removal, so a full
-- memory does not refuse it after the writes above.
-- The rows after the last one deleted are looked at first, eight at a
-- time: a stream deletes its oldest rows, and the next is usually there.
for _, b in ipairs(blocks) do
  local prefix, base = ssub(b, 1, 8), sbyte(b, 9)
  local any, first = false, emptied[b] + 1
  for chunk = 0, 7 do
    local cand = {}
    for i = 0, 7 do
      cand[i + 1] = prefix .. schar(base + (first + chunk * 8 + i) % 64)
    end
    local got = call('HMGET', KEYS[1], unpack(cand))
    for i = 1, 8 do
      if got[i] then
        any = true
        break
      end
    end
    if any then
      break
    end
  end
  if not any then
    call('ZREM', KEYS[2], b)
  end
end

if putDue and (not delDue or delDue >= putDue) then
  -- The entry held the partition's earliest timer before the batch. A timer
  -- deleted is due no earlier than putDue, so whether or not it was that
  -- earliest, the earliest now is the lower of the entry and putDue (LT
  -- adds the entry when there was none).
  call('ZADD', KEYS[3], 'LT', string.format('%.17g', putDue), argv[1])
elseif delDue then
  local upper = '+'
  if tagByte < 255 then
    upper = '(' .. schar(tagByte + 1)
  end
  local first = call('ZRANGEBYLEX', KEYS[2], '[' .. tag, upper, 'LIMIT', 0, 1)
  if #first == 0 then
    call('ZREM', KEYS[3], argv[1])
  else
    -- A timer key too short to carry a due time counts as due now (dueOf);
    -- this script refuses to put one, so only a foreign writer can cause it.
    call('ZADD', KEYS[3], string.format('%.17g', dueOf(first[1])), argv[1])
  end
end

-- The registry and the flag sets, like the due index of a batch that
-- deletes a timer due before any it puts, are read back from the rows the
-- batch left, never from the batch itself: a batch run twice, or one that
-- puts and deletes in any order, leaves the entry the rows say.
local function holds(tagStr, tb)
  local upper = '+'
  if tb < 255 then
    upper = '(' .. schar(tb + 1)
  end
  return #call('ZRANGEBYLEX', KEYS[2], '[' .. tagStr, upper, 'LIMIT', 0, 1) > 0
end
if registry then
  if holds(regTag, regByte) then
    call('ZADD', KEYS[4], 0, argv[1])
  else
    call('ZREM', KEYS[4], argv[1])
  end
end
-- A flag set's size in KEYS[5] moves only with what ZADD and ZREM report
-- they changed, so it stays the set's size whatever the batches do.
local function flag(tb, set, field)
  local n
  if holds(schar(tb), tb) then
    n = call('ZADD', KEYS[set], 0, argv[1])
  else
    n = -call('ZREM', KEYS[set], argv[1])
  end
  if n ~= 0 then
    call('HINCRBY', KEYS[5], field, n)
  end
end
if flagged1 then
  flag(flagByte1, 7, 'flag1')
end
if flagged2 then
  flag(flagByte2, 8, 'flag2')
end

-- Summed rows: the change of each, from the row as it stood (read above:
-- an added row is, and so is every put or deleted row but a timer, an
-- unordered or a blocked one) to the row as the batch left it.
if summed then
  local function counter(v, k)
    if not v or #v < 1 + 8 * k or (#v - 1) % 8 ~= 0 then
      return 0
    end
    local n, from = 0, 2 + 8 * (k - 1)
    local b1, b2 = sbyte(v, from, from + 1)
    if b1 ~= 0 or b2 >= 32 then
      -- Beyond what a counter may hold: no store write makes one.
      return 0
    end
    for m = from, from + 7 do
      n = n * 256 + sbyte(v, m)
    end
    return n
  end
  local d1, d2 = 0, 0
  for key, v in pairs(left) do
    if sbyte(key) == sumByte then
      local was = at[key] and stood[at[key]]
      d1 = d1 + counter(v, 1) - counter(was, 1)
      d2 = d2 + counter(v, 2) - counter(was, 2)
    end
  end
  if d1 ~= 0 then
    call('HINCRBY', KEYS[5], 'sum1', string.format('%.17g', d1))
    local n = tonumber(call('ZINCRBY', KEYS[6], string.format('%.17g', d1), argv[1]))
    if n <= 0 then
      call('ZREM', KEYS[6], argv[1])
    end
  end
  if d2 ~= 0 then
    call('HINCRBY', KEYS[5], 'sum2', string.format('%.17g', d2))
  end
end

-- A row the batch wrote is as it left it, and any other as it stood.
if nr > 0 then
  local rows = {}
  for i = r0, #argv do
    local key = argv[i]
    local v = left[key]
    if v == nil then
      v = stood[at[key]]
    end
    rows[i - r0 + 1] = v
  end
  return {1, rows}
end
return {1}
