-- wrk script for bench/vs_serve.py: POSTs the body in $WRK_BODY (a file) to $WRK_PATH and counts
-- answers by status, printed as one JSON line when wrk finishes.
local body_file = os.getenv("WRK_BODY")
local f = assert(io.open(body_file, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.path = os.getenv("WRK_PATH")
wrk.headers["Content-Type"] = "application/json"

local counts = {}
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
end

function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, n in pairs(s) do
      counts[code] = (counts[code] or 0) + n
    end
  end
  local parts = {}
  for code, n in pairs(counts) do
    table.insert(parts, string.format('"%d": %d', code, n))
  end
  io.write(string.format(
    '{"requests": %d, "seconds": %.3f, "p50_ms": %.3f, "p99_ms": %.3f, "errors": %d, "status": {%s}}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    table.concat(parts, ", ")))
end
