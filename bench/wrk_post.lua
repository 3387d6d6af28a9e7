-- wrk script for bench/vs_serve.py: POSTs the body in $WRK_BODY (a file) to $WRK_PATH and counts
-- answers by status, printed as one JSON line when wrk finishes.
local body_file = os.getenv("WRK_BODY")
local f = assert(io.open(body_file, "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.path = os.getenv("WRK_PATH")
wrk.headers["Content-Type"] = "application/json"
-- The binary tensor data extension: $WRK_HEADER_LENGTH is the JSON part's length.
if os.getenv("WRK_HEADER_LENGTH") then
  wrk.headers["Content-Type"] = "application/octet-stream"
  wrk.headers["Inference-Header-Content-Length"] = os.getenv("WRK_HEADER_LENGTH")
end

-- Pacing: each connection waits $WRK_DELAY_MS after an answer before its next request, so that
-- 64 connections offer a set rate (four times the saturating one) instead of resending at once
-- whatever the answer (a closed loop that answers 429 in microseconds offers any rate).
local delay_ms = tonumber(os.getenv("WRK_DELAY_MS") or "0")
if delay_ms > 0 then
  function delay()
    return delay_ms
  end
end

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
    '{"requests": %d, "seconds": %.3f, "p50_ms": %.3f, "p99_ms": %.3f, "errors": %d, ' ..
    '"error_kinds": {"connect": %d, "read": %d, "write": %d, "timeout": %d}, "status": {%s}}\n',
    summary.requests, summary.duration / 1e6, latency:percentile(50) / 1e3, latency:percentile(99) / 1e3,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    summary.errors.connect, summary.errors.read, summary.errors.write, summary.errors.timeout,
    table.concat(parts, ", ")))
end
