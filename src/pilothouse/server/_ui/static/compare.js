// Compare: one prompt to two or three columns (POST /ui/compare, Server-Sent Events over
// fetch, each event naming its column). Each column's answer is rendered as Markdown (the
// playground's sanitised renderer) and ends with its tokens, cost and latency.
"use strict";
const Compare = (() => {
  const $ = (selector) => document.querySelector(selector);
  let busy = false;

  function status(text) { $("#compare-status").textContent = text; }

  function columns() {
    const found = [];
    document.querySelectorAll("select[name=target]").forEach((select) => {
      if (!select.value) return;
      const i = select.dataset.column;
      found.push({ target: select.value, configuration: $("#compare-configuration-" + i).value });
    });
    return found;
  }

  function panel(column, index) {
    const section = document.createElement("section");
    section.className = "compare-column card";
    section.setAttribute("aria-labelledby", "compare-head-" + index);
    const head = document.createElement("h2");
    head.id = "compare-head-" + index;
    head.textContent = column.target + (column.configuration ? " · " + column.configuration : "");
    const answer = document.createElement("div");
    answer.className = "text markdown";
    answer.setAttribute("data-markdown", "");
    answer.setAttribute("data-streaming", "");
    const meta = document.createElement("p");
    meta.className = "turn-meta compare-meta";
    meta.textContent = "Waiting…";
    const link = document.createElement("p");
    link.className = "turn-meta";
    section.append(head, answer, meta, link);
    return { section, answer, meta, link, text: "" };
  }

  function finish(view, result) {
    view.answer.removeAttribute("data-streaming");
    if (window.Markdown) window.Markdown.render(view.answer, view.text);
    const first = result.first_token_ms === null ? "" : " · first token " + result.first_token_ms + " ms";
    view.meta.textContent = result.input_tokens + " in / " + result.output_tokens + " out tokens · cost $" +
      window.Playground.plainDecimal(String(result.cost)) + " · " + result.latency_ms + " ms" + first +
      " · " + window.Playground.statusName(result.status);
    view.section.dataset.done = "1";
  }

  async function submit(event) {
    event.preventDefault();
    if (busy) return false;
    const text = $("#compare-prompt").value.trim();
    const chosen = columns();
    if (!text) { $("#compare-prompt").focus(); return false; }
    if (chosen.length < 2) { status("Choose at least two columns."); return false; }
    busy = true;
    $("#compare-send").disabled = true;
    const results = $("#compare-results");
    results.innerHTML = "";
    results.style.setProperty("--columns", String(chosen.length));
    const views = chosen.map((column, i) => { const v = panel(column, i); results.appendChild(v.section); return v; });
    status("Comparing…");
    let failure = null;
    try {
      const response = await fetch("/ui/compare", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
        body: JSON.stringify({ text, columns: chosen }),
      });
      if (!response.ok) {
        let body = null;
        try { body = await response.json(); } catch (e) { body = null; }
        throw new Error((body && (body.detail || body.title)) || "Refused (" + response.status + ").");
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let name = "message"; let data = "";
          for (const line of frame.split("\n")) {
            if (line.startsWith("event: ")) name = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          const payload = data ? JSON.parse(data) : {};
          const view = views[payload.index];
          if (name === "column") {
            view.meta.textContent = "The model is answering…";
            const a = document.createElement("a");
            a.href = "/playground?c=" + encodeURIComponent(payload.uuid);
            a.textContent = "Open in the playground";
            view.link.replaceChildren(a);
            view.section.dataset.conversation = payload.uuid;
          } else if (name === "delta") {
            view.text += payload.text;
            if (window.Markdown) window.Markdown.stream(view.answer, view.text);
            else view.answer.textContent = view.text;
          } else if (name === "finished") {
            finish(view, payload);
          } else if (name === "error") {
            view.answer.removeAttribute("data-streaming");
            view.meta.textContent = "";
            const p = document.createElement("p");
            p.className = "error";
            p.setAttribute("role", "alert");
            p.textContent = payload.detail;
            view.meta.replaceChildren(p);
          }
        }
      }
    } catch (error) {
      failure = error.message || String(error);
    }
    busy = false;
    $("#compare-send").disabled = false;
    status(failure || "Done.");
    document.body.dataset.compared = String(Number(document.body.dataset.compared || 0) + 1);
    return false;
  }

  return { submit };
})();
window.Compare = Compare;
