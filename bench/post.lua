-- bench/post.lua - wrk script: POST a fixed JSON body (BENCH_BODY file) with
-- optional extra headers (BENCH_HEADERS="Name: value|Name: value"), and
-- print one machine-readable summary line at the end.
local function read_file(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

wrk.method = "POST"
wrk.body = read_file(os.getenv("BENCH_BODY"))
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-bench"
local extra = os.getenv("BENCH_HEADERS") or ""
for pair in string.gmatch(extra, "[^|]+") do
  local name, value = string.match(pair, "^%s*([^:]+):%s*(.*)$")
  if name then wrk.headers[name] = value end
end

done = function(summary, latency, requests)
  local secs = summary.duration / 1e6
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
    + summary.errors.status + summary.errors.timeout
  io.write(string.format("RESULT rps=%.1f p50_us=%d p99_us=%d requests=%d errors=%d\n",
    summary.requests / secs, latency:percentile(50), latency:percentile(99),
    summary.requests, errors))
end
