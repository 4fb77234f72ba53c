-- The load of bench/ingest.mjs when wrk is installed: signed bodies from a pool file written
-- by the bench before the clock starts ("signature<TAB>body" per line), one in ten a
-- duplicate of one of the last 100 deliveries, as senders retry. wrk spends a fraction of autocannon's
-- CPU per request, which matters on a machine whose cores the server shares.
--
--   wrk -t1 -c64 -d10s -s bench/wrk-load.lua http://127.0.0.1:PORT -- POOL OFFSET ACKED_FILE|-
--
-- POOL: the pool file; OFFSET: the first line to send (runs against one PostgreSQL database
-- must not resend earlier ids); ACKED_FILE: where the event ids of the 2xx answers go, one
-- per line ("-": not recorded). The summary goes to stdout as one JSON line.
local threads = {}
function setup(thread)
  table.insert(threads, thread)
end

-- Globals, so that done() can read them from the thread with thread:get(). The pool is read
-- line by line as the load goes (holding it all would put hundreds of MB under LuaJIT's
-- garbage collector, whose pauses then show up as the server's latency).
file, cursor, seq, acked, record, ackedFile, wrapped = nil, 0, 0, {}, false, "-", false
local path
local recent, filled, slot = {}, 0, 0

local function nextLine()
  local line = file:read("*l")
  if line == nil then
    wrapped = true
    file:close()
    file = assert(io.open(path, "r"))
    line = file:read("*l")
  end
  return line
end

function init(args)
  path = args[1]
  file = assert(io.open(path, "r"))
  cursor = tonumber(args[2])
  for _ = 1, cursor do nextLine() end
  ackedFile = args[3]
  record = ackedFile ~= "-"
end

function request()
  seq = seq + 1
  local e
  if filled == 100 and seq % 10 == 0 then
    e = recent[math.random(1, 100)]
  else
    local line = nextLine()
    local tab = string.find(line, "\t", 1, true)
    e = { string.sub(line, 1, tab - 1), string.sub(line, tab + 1) }
    cursor = cursor + 1
    slot = slot % 100 + 1
    recent[slot] = e
    if filled < 100 then filled = filled + 1 end
  end
  return wrk.format("POST", "/webhooks/shop", { ["Content-Type"] = "application/json", ["X-Signature"] = e[1] }, e[2])
end

function response(status, headers, body)
  if record and status >= 200 and status < 300 then
    local id = string.match(body, '"id":(%d+)')
    if id then acked[#acked + 1] = id end
  end
end

function done(summary, latency, requests)
  -- One thread (-t1): the pool is read in order from OFFSET.
  local sent = threads[1]:get("cursor")
  if threads[1]:get("record") then
    local out = assert(io.open(threads[1]:get("ackedFile"), "w"))
    for _, id in ipairs(threads[1]:get("acked")) do out:write(id, "\n") end
    out:close()
  end
  local e = summary.errors
  io.write(string.format(
    '{"requests":%d,"seconds":%.3f,"p50":%.3f,"p99":%.3f,"non2xx":%d,"errors":%d,"cursor":%d,"wrapped":%s}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    e.status, e.connect + e.read + e.write + e.timeout, sent, tostring(threads[1]:get("wrapped"))))
end
