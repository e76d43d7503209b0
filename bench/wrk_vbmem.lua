-- wrk_vbmem.lua -- owns the wrk side of bench/overload.py: request mix over prepared vbmemd
-- sessions, optional open-loop pacing, per-status counts, Retry-After checks and the latency of
-- admitted (2xx) requests, written as one JSON object to $VBM_OUT.
--
-- Environment (set by bench/overload.py):
--   VBM_PLAN   file: line 1 "mix" weights "write:W samples:S reads:R get:G iwrite:I isamples:J",
--              then one line per request kind "KIND<TAB>BODYFILE", one line per latent session
--              "session<TAB>ID" and one per image-model session "isession<TAB>ID" (iwrite: codes
--              written to it; isamples: samples decoded to PNG)
--   VBM_RATE   total offered requests/s over all threads (0 or unset: closed loop, no pacing)
--   VBM_OUT    where done() writes the JSON result
--   VBM_LAT    1: time each request (an X-Request-Id carrying the send time, echoed by vbmemd)
-- Every latency is client side, from request() (just before the first byte is written) to
-- response() (the last byte read), in ms, and only for 2xx answers.

local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } vbm_timespec;
int clock_gettime(int clk, vbm_timespec *ts);
]]
local ts = ffi.new("vbm_timespec")
local function now_us()
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) * 1000000 + math.floor(tonumber(ts.tv_nsec) / 1000)
end

local threads = {}
local counter = 0

function setup(thread)
  thread:set("tid", counter)
  counter = counter + 1
  table.insert(threads, thread)
end

local function slurp(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- per-thread state (each wrk thread has its own Lua state)
local kinds, weights, bodies, sessions, isessions = {}, {}, {}, {}, {}
local cycle = {}
local pos, spos, ipos = 0, 0, 0
local interval_us, next_slot = 0, 0
local timing = false
counts = {}
retry_missing = 0
lat = {}
nlat = 0
-- server-side timings of the 2xx writes (their "timings": queue_s, from submission to a worker,
-- and total_s, from the request's headers to the answer), in ms
qlat, tlat = {}, {}
nq = 0

function init(args)
  local plan = assert(os.getenv("VBM_PLAN"), "VBM_PLAN is not set")
  for line in io.lines(plan) do
    local a, b = line:match("^(%S+)\t(.*)$")
    if a == "mix" then
      for k, w in b:gmatch("(%a+):(%d+)") do
        weights[k] = tonumber(w)
      end
    elseif a == "session" then
      table.insert(sessions, b)
    elseif a == "isession" then
      table.insert(isessions, b)
    elseif a ~= nil then
      bodies[a] = slurp(b)
    end
  end
  -- a fixed interleaving of the kinds by weight: W writes, S samples, ... per cycle
  for _, k in ipairs({"write", "samples", "reads", "get", "iwrite", "isamples"}) do
    for _ = 1, (weights[k] or 0) do
      table.insert(cycle, k)
    end
  end
  assert(#cycle > 0 and #sessions > 0, "empty plan")
  local rate = tonumber(os.getenv("VBM_RATE") or "0")
  local nthreads = tonumber(os.getenv("VBM_THREADS") or "1")
  if rate > 0 then
    interval_us = 1000000 * nthreads / rate
  end
  timing = os.getenv("VBM_LAT") == "1"
  -- start each thread at another point of the session list and of the mix
  pos = tid or 0
  spos = (tid or 0) * 7
end

if tonumber(os.getenv("VBM_RATE") or "0") > 0 then
  -- open-loop pacing per thread: the next request may start at the next slot of a fixed
  -- schedule (a connection that falls behind sends at once; wrk's delay() is in whole ms)
  function delay()
    local t = now_us()
    if next_slot < t then
      next_slot = t
    end
    local d = next_slot - t
    next_slot = next_slot + interval_us
    return math.floor(d / 1000)
  end
end

local hdr_json = {["Content-Type"] = "application/json"}

function request()
  pos = pos % #cycle + 1
  spos = spos % #sessions + 1
  local kind = cycle[pos]
  local id = sessions[spos]
  local h = {["Content-Type"] = "application/json"}
  if timing then
    h["X-Request-Id"] = "t" .. now_us()
  end
  if kind == "iwrite" or kind == "isamples" then
    ipos = ipos % #isessions + 1
    local path = "/v1/sessions/" .. isessions[ipos]
    if kind == "iwrite" then
      return wrk.format("POST", path .. "/episodes", h, bodies.iwrite)
    end
    return wrk.format("POST", path .. "/samples", h, bodies.isamples)
  end
  if kind == "write" then
    return wrk.format("POST", "/v1/sessions/" .. id .. "/episodes", h, bodies.write)
  elseif kind == "samples" then
    return wrk.format("POST", "/v1/sessions/" .. id .. "/samples", h, bodies.samples)
  elseif kind == "reads" then
    return wrk.format("POST", "/v1/sessions/" .. id .. "/reads", h, bodies.reads)
  end
  h["Content-Type"] = nil
  return wrk.format("GET", "/v1/sessions/" .. id, h, nil)
end

function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
  if status == 503 or status == 429 then
    local ra = headers["Retry-After"]
    if ra == nil or not ra:match("^%d+$") then
      retry_missing = retry_missing + 1
    end
  end
  if status >= 200 and status < 300 and body ~= nil then
    local q = body:match('"queue_s":([-%d.eE+]+)')
    local t = body:match('"total_s":([-%d.eE+]+)')
    if q ~= nil and t ~= nil then
      nq = nq + 1
      qlat[nq] = tonumber(q) * 1000
      tlat[nq] = tonumber(t) * 1000
    end
  end
  if timing and status >= 200 and status < 300 then
    local rid = headers["X-Request-Id"]
    if rid ~= nil and rid:sub(1, 1) == "t" then
      nlat = nlat + 1
      lat[nlat] = (now_us() - tonumber(rid:sub(2))) / 1000.0
    end
  end
end

local function pct(sorted, p)
  if #sorted == 0 then
    return nil
  end
  local i = math.ceil(p / 100 * #sorted)
  if i < 1 then
    i = 1
  end
  return sorted[i]
end

function done(summary, latency, requests)
  local all, qall, tall = {}, {}, {}
  local total = {}
  local missing = 0
  for _, t in ipairs(threads) do
    local c = t:get("counts")
    for k, v in pairs(c) do
      total[k] = (total[k] or 0) + v
    end
    missing = missing + t:get("retry_missing")
    local l = t:get("lat")
    for i = 1, #l do
      all[#all + 1] = l[i]
    end
    local q, tt = t:get("qlat"), t:get("tlat")
    for i = 1, #q do
      qall[#qall + 1] = q[i]
      tall[#tall + 1] = tt[i]
    end
  end
  table.sort(all)
  table.sort(qall)
  table.sort(tall)
  local parts = {}
  for k, v in pairs(total) do
    parts[#parts + 1] = string.format('"%d":%d', k, v)
  end
  local e = summary.errors
  local function num(x)
    if x == nil then
      return "null"
    end
    return string.format("%.3f", x)
  end
  local out = string.format(
    '{"duration_s":%.3f,"requests":%d,"bytes":%d,"status":{%s},"retry_after_missing":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"admitted_timed":%d,"admitted_p50_ms":%s,"admitted_p99_ms":%s,"admitted_max_ms":%s,' ..
    '"server_writes":%d,"server_queue_p99_ms":%s,"server_queue_max_ms":%s,' ..
    '"server_total_p99_ms":%s,"server_total_max_ms":%s,' ..
    '"all_p50_ms":%.3f,"all_p99_ms":%.3f,"all_max_ms":%.3f}',
    summary.duration / 1e6, summary.requests, summary.bytes, table.concat(parts, ","), missing,
    e.connect, e.read, e.write, e.status, e.timeout, #all, num(pct(all, 50)), num(pct(all, 99)),
    num(all[#all]), #qall, num(pct(qall, 99)), num(qall[#qall]), num(pct(tall, 99)),
    num(tall[#tall]), latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    latency.max / 1000)
  local path = os.getenv("VBM_OUT")
  if path then
    local f = assert(io.open(path, "w"))
    f:write(out .. "\n")
    f:close()
  end
  io.write(out .. "\n")
end
