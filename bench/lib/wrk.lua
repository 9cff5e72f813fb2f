-- bench/lib/wrk.lua - the wrk script of bench/run. POSTs JSON with a client
-- credential and prints one machine-readable line at the end:
--   RESULT rps=... p50_us=... p99_us=... requests=... errors=...
-- (errors include answers >= 400; no response() hook, which would slow wrk down)
--
-- BENCH_MODE (default fixed):
--   fixed   the body of the file BENCH_BODY, every request the same (wrk's static path)
--   lines   one body per line of the file BENCH_LINES, taken in turn (pre-formatted)
--   unique  a new body per request (a cache miss): the question carries
--           BENCH_SALT, the thread and a counter
-- BENCH_HEADERS="Name: value|Name: value" adds headers.
local mode = os.getenv("BENCH_MODE") or "fixed"
local salt = os.getenv("BENCH_SALT") or tostring(os.time())

local function read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
for pair in string.gmatch(os.getenv("BENCH_HEADERS") or "", "[^|]+") do
  local name, value = string.match(pair, "^%s*([^:]+):%s*(.*)$")
  if name then wrk.headers[name] = value end
end
if mode == "fixed" then wrk.body = read_file(os.getenv("BENCH_BODY")) end

local next_id = 0
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

local reqs, n, i, counter = {}, 0, 0, 0
if mode == "lines" then
  function init(args)
    for line in io.lines(os.getenv("BENCH_LINES")) do
      if #line > 0 then
        n = n + 1
        reqs[n] = wrk.format(nil, nil, nil, line)
      end
    end
    assert(n > 0, "BENCH_LINES is empty")
    i = ((tid or 0) * 7919) % n -- threads start at different lines
  end
  function request()
    i = i % n + 1
    return reqs[i]
  end
elseif mode == "unique" then
  local fmt = '{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a helpful assistant."},'
    .. '{"role":"user","content":"Question %s-%d-%d: what is the capital of France? Answer in one word."}],"temperature":0}'
  function request()
    counter = counter + 1
    return wrk.format(nil, nil, nil, string.format(fmt, salt, tid or 0, counter))
  end
end

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d requests=%d errors=%d\n",
    summary.requests / secs, latency:percentile(50), latency:percentile(99),
    summary.requests, errors))
end
