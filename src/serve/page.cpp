// The try-it page (page.h).
#include "serve/page.h"

namespace cpudl::serve {

const char* const kPage = R"html(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>cpudl serve</title>
<style>
  body { font: 15px/1.4 system-ui, sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; color: #222; }
  h1 { font-size: 1.4em; } h2 { font-size: 1.1em; margin-top: 1.5em; }
  textarea, input, select, button { font: inherit; }
  textarea { width: 100%; height: 4em; }
  pre { background: #f4f4f4; padding: .6em; white-space: pre-wrap; min-height: 1.5em; }
  table { border-collapse: collapse; } td { padding: .1em .8em .1em 0; }
  .muted { color: #777; }
</style>
</head>
<body>
<h1>cpudl serve</h1>
<p class="muted">API key (if the server asks for one): <input id="key" type="password" size="24"></p>
<h2>Models</h2>
<table id="models"><tr><td class="muted">loading...</td></tr></table>

<section id="chat-section" hidden>
<h2>Chat</h2>
<p><select id="llm"></select> max tokens <input id="max" type="number" value="128" min="1" style="width:5em"></p>
<textarea id="message" placeholder="Say something"></textarea>
<p><button id="send">Send</button></p>
<pre id="answer"></pre>
</section>

<section id="image-section" hidden>
<h2>Classify an image</h2>
<p><select id="classifier"></select> <input id="image" type="file" accept=".png,.pgm,image/png"></p>
<pre id="classes"></pre>
</section>

<h2>Metrics</h2>
<table id="metrics"></table>

<script>
"use strict";
const $ = (id) => document.getElementById(id);
const headers = (extra) => {
  const h = Object.assign({}, extra || {});
  if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
  return h;
};

async function loadModels() {
  const r = await fetch("/v1/models", { headers: headers() });
  const list = (await r.json()).data || [];
  const table = $("models");
  table.innerHTML = "";
  for (const m of list) {
    const meta = await (await fetch("/v2/models/" + encodeURIComponent(m.id), { headers: headers() })).json();
    const row = table.insertRow();
    row.insertCell().textContent = m.id;
    row.insertCell().textContent = meta.platform || "";
    const option = document.createElement("option");
    option.value = option.textContent = m.id;
    if (meta.platform === "gguf") { $("llm").appendChild(option); $("chat-section").hidden = false; }
    if (meta.platform === "cpudl_safetensors") { $("classifier").appendChild(option); $("image-section").hidden = false; }
  }
}

// Streams a chat reply into #answer from the server-sent events of /v1/chat/completions.
async function chat(text, maxTokens) {
  $("answer").textContent = "";
  const body = { model: $("llm").value, messages: [{ role: "user", content: text }], stream: true,
                 max_tokens: maxTokens, temperature: 0 };
  const r = await fetch("/v1/chat/completions", { method: "POST", headers: headers({ "Content-Type": "application/json" }),
                                                  body: JSON.stringify(body) });
  if (!r.ok) { $("answer").textContent = "error " + r.status + ": " + (await r.text()); return; }
  const reader = r.body.getReader(), decoder = new TextDecoder();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let at;
    while ((at = pending.indexOf("\n\n")) >= 0) {
      const event = pending.slice(0, at);
      pending = pending.slice(at + 2);
      if (!event.startsWith("data: ") || event === "data: [DONE]") continue;
      const delta = JSON.parse(event.slice(6)).choices[0].delta || {};
      if (delta.content) $("answer").textContent += delta.content;
    }
  }
}

$("send").onclick = () => chat($("message").value, Number($("max").value));
$("image").onchange = async () => {
  const file = $("image").files[0];
  if (!file) return;
  const r = await fetch("/v1/models/" + encodeURIComponent($("classifier").value) + "/classify",
                        { method: "POST", headers: headers({ "Content-Type": "application/octet-stream" }), body: file });
  const j = await r.json();
  $("classes").textContent = r.ok ? j.top.map((t) => t.label + "  " + (100 * t.probability).toFixed(1) + "%").join("\n")
                                  : "error " + r.status + ": " + JSON.stringify(j.error);
};

const shown = ["cpudl_requests_total", "cpudl_inflight_requests", "cpudl_queue_depth", "cpudl_llm_generated_tokens_total",
               "cpudl_llm_tokens_per_second", "cpudl_llm_slots_busy", "process_resident_memory_bytes"];
async function metrics() {
  try {
    const text = await (await fetch("/metrics", { headers: headers() })).text();
    const sums = {};
    for (const line of text.split("\n")) {
      if (line.startsWith("#") || !line) continue;
      const name = line.split(/[{ ]/)[0];
      if (shown.includes(name)) sums[name] = (sums[name] || 0) + Number(line.slice(line.lastIndexOf(" ") + 1));
    }
    const table = $("metrics");
    table.innerHTML = "";
    for (const name of shown) {
      if (!(name in sums)) continue;
      const row = table.insertRow();
      row.insertCell().textContent = name;
      row.insertCell().textContent = Number.isInteger(sums[name]) ? sums[name] : sums[name].toFixed(2);
    }
  } catch (e) {}
}

(async () => {
  await loadModels();
  metrics();
  setInterval(metrics, 2000);
  const q = new URLSearchParams(location.search);
  if (q.has("chat")) {
    await chat(q.get("chat"), Number(q.get("max_tokens") || 32));
    document.title = "done";
  }
})();
</script>
</body>
</html>
)html";

}  // namespace cpudl::serve
