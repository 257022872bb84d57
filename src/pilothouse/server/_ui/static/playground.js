// The playground's chat: streams a turn from POST /ui/chat (Server-Sent Events over fetch,
// since EventSource cannot POST), and runs the per-prompt edits. Plain browser JavaScript,
// no build step; htmx swaps the fragments the server renders.
"use strict";
const Playground = (() => {
  const $ = (selector) => document.querySelector(selector);
  let busy = false;
  // The running turn: its conversation (once the stream named it), its fetch, whether Stop was asked.
  let running = null;

  function current() { return $("#chat").dataset.conversation || null; }

  function setCurrent(uuid) {
    $("#chat").dataset.conversation = uuid;
    const url = new URL(window.location.href);
    url.searchParams.set("c", uuid);
    url.searchParams.delete("target");
    window.history.replaceState(null, "", url);
  }

  // Conversation statuses as words, as the server's "status_name" filter writes them.
  const STATUS = { NS: "not started", RU: "running", CO: "completed", FA: "failed", TE: "terminated",
    KI: "killed", ST: "stuck", WA: "waiting", PA: "paused" };
  function statusName(code) { return STATUS[code] || code; }

  function status(text) { $("#stream-status").textContent = text; }

  function options() {
    // Only the settings moved away from the configuration are sent: the rest stay the model's own.
    const found = {};
    document.querySelectorAll("#settings-form input.value").forEach((input) => {
      if (input.value !== "" && input.value !== input.dataset.default) found[input.name] = Number(input.value);
    });
    return found;
  }

  function templateInput() {
    const found = {};
    document.querySelectorAll("[data-placeholder]").forEach((field) => { found[field.dataset.placeholder] = field.value; });
    return found;
  }

  function rag() {
    // The settings panel's RAG toggle: null when off; the collection and who answers when on.
    const on = $("#rag-on");
    if (!on || !on.checked) return null;
    const collection = ($("#rag-collection") || { value: "" }).value;
    if (!collection) throw new Error("RAG is on: choose a document collection, or switch RAG off.");
    const mode = document.querySelector("input[name=rag-mode]:checked");
    return { collection, answer_with: mode ? mode.value : "playground" };
  }

  function plainDecimal(text) {
    // A cost as the server's "cost" filter writes it: no exponent (7.5E-7 is 0.00000075),
    // no trailing zeros.
    let plain = text;
    const m = /^(-?)(\d+)(?:\.(\d+))?[eE]([-+]?\d+)$/.exec(text);
    if (m) {
      const digits = m[2] + (m[3] || "");
      const point = m[2].length + Number(m[4]);
      if (point <= 0) plain = m[1] + "0." + "0".repeat(-point) + digits;
      else if (point >= digits.length) plain = m[1] + digits + "0".repeat(point - digits.length);
      else plain = m[1] + digits.slice(0, point) + "." + digits.slice(point);
    }
    if (plain.includes(".")) plain = plain.replace(/0+$/, "").replace(/\.$/, "");
    return plain === "-0" || plain === "" ? "0" : plain;
  }

  function problemText(body, fallback) {
    if (body && typeof body === "object") return body.detail || body.title || fallback;
    return fallback;
  }

  async function refreshList(uuid) {
    await htmx.ajax("GET", "/ui/conversations" + (uuid ? "?c=" + encodeURIComponent(uuid) : ""), { target: "#conversation-list" });
  }

  async function load(uuid) {
    setCurrent(uuid);
    await htmx.ajax("GET", "/ui/conversations/" + encodeURIComponent(uuid), { target: "#chat" });
    const chat = $("#chat");
    chat.scrollTop = chat.scrollHeight;
  }

  function liveList() {
    let list = $("#chat ol.messages");
    if (!list) {
      $("#chat").innerHTML = '<ol class="messages" aria-label="Messages"></ol>';
      list = $("#chat ol.messages");
    }
    return list;
  }

  function bubble(list, cls, text) {
    const item = document.createElement("li");
    const div = document.createElement("div");
    div.className = "bubble " + cls;
    const body = document.createElement("div");
    body.className = "text";
    body.textContent = text;
    div.appendChild(body);
    item.appendChild(div);
    list.appendChild(item);
    return { item, div, body };
  }

  async function saveTemplateIfAsked() {
    const box = $("#update-template");
    const form = $("#template-form");
    if (!box || !box.checked || !form) return true;
    const response = await fetch(form.getAttribute("hx-post"), { method: "POST", body: new FormData(form) });
    const html = await response.text();
    $("#template-panel").innerHTML = html;
    htmx.process($("#template-panel"));
    return response.ok;
  }

  async function send(text, conversation) {
    if (busy) return;
    busy = true;
    $("#send").disabled = true;
    const controller = new AbortController();
    running = { uuid: conversation, controller, stopped: false };
    $("#stop").hidden = false;
    status("Sending…");
    const list = liveList();
    bubble(list, "user", text);
    const answer = bubble(list, "assistant", "");
    answer.div.setAttribute("aria-live", "polite");
    const chat = $("#chat");
    let uuid = conversation;
    let finished = null;
    let failure = null;
    let deltas = 0;
    let streamed = "";
    // The answer is Markdown as it grows, rendered as the finished one will be.
    answer.body.classList.add("markdown");
    answer.body.setAttribute("data-markdown", "");
    answer.body.dataset.streaming = "1";
    try {
      const choice = rag();
      // The collection's own model answers without the panel's settings: none are sent.
      const own = choice && choice.answer_with === "collection";
      if (!own && !(await saveTemplateIfAsked())) throw new Error("The template was not saved; see the message above.");
      const response = await fetch("/ui/chat", {
        method: "POST",
        headers: { "Content-Type": "application/json", "Accept": "text/event-stream" },
        body: JSON.stringify({ conversation, target: $("#target").value, text, rag: choice,
          input: own ? {} : templateInput(), options: own ? {} : options(),
          instruction: own ? "" : ($("#instruction") || { value: "" }).value }),
        signal: controller.signal,
      });
      if (!response.ok) {
        let body = null;
        try { body = await response.json(); } catch (e) { body = null; }
        throw new Error(problemText(body, "The prompt was refused (" + response.status + ")."));
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      status("The model is answering…");
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
          if (name === "conversation") {
            uuid = payload.uuid; setCurrent(uuid);
            running.uuid = uuid;
            if (running.stopped) cancel(uuid);
          }
          else if (name === "rag") {
            const note = document.createElement("p");
            note.className = "turn-meta rag-live";
            note.textContent = "RAG: collection " + payload.collection + (payload.answer_with === "collection"
              ? " · the collection's model " + payload.model : " · playground settings");
            answer.div.appendChild(note);
          }
          else if (name === "delta") {
            deltas += 1;
            streamed += payload.text;
            Markdown.stream(answer.body, streamed);
            chat.scrollTop = chat.scrollHeight;
          }
          else if (name === "tool_call") {
            const note = document.createElement("p");
            note.className = "turn-meta";
            note.textContent = "Tool call " + payload.name + " " + JSON.stringify(payload.arguments);
            answer.div.appendChild(note);
          } else if (name === "tool_result") {
            const note = document.createElement("p");
            note.className = "turn-meta";
            const result = payload.result.length > 300 ? payload.result.slice(0, 300) + "…" : payload.result;
            note.textContent = "Tool result " + payload.name + ": " + result;
            answer.div.appendChild(note);
          } else if (name === "finished") { finished = payload; }
          else if (name === "error") { failure = payload.detail; }
        }
      }
    } catch (error) {
      // A Stop before the stream named its conversation aborts the request: the server
      // cancels the turn when its stream is closed, and the reload below shows what was kept.
      if (!(running && running.stopped && error.name === "AbortError")) failure = error.message || String(error);
    }
    const stopped = running && running.stopped;
    running = null;
    busy = false;
    $("#send").disabled = false;
    $("#stop").hidden = true;
    // How many pieces the answer streamed in (shown to screen readers as nothing; read by tests).
    document.body.dataset.lastDeltas = String(deltas);
    if (uuid) {
      await load(uuid);
      await refreshList(uuid);
    }
    if (finished) {
      // Counts finished turns on this page (a test waits for it; nothing reads it otherwise).
      document.body.dataset.turns = String(Number(document.body.dataset.turns || 0) + 1);
      // The reloaded chat shows the turn's line from its record (data.turn_usage of the last
      // message it wrote). A turn that wrote no message (a failure before any answer) has no
      // record of its own: its line is shown from the result, in the same words.
      const line = "This turn: " + finished.input_tokens + " in / " + finished.output_tokens +
        " out tokens · cost $" + plainDecimal(String(finished.cost)) + " · " + statusName(finished.status);
      // The line the result gave (read by the browser test, which compares it after a reload).
      document.body.dataset.lastTurn = line;
      const shown = document.querySelectorAll("#chat .turn-cost");
      if (!shown.length || shown[shown.length - 1].textContent !== line) {
        const item = document.createElement("li");
        const meta = document.createElement("p");
        meta.className = "turn-meta turn-cost";
        meta.textContent = line;
        item.appendChild(meta);
        liveList().appendChild(item);
      }
    }
    status(failure ? "" : (stopped ? "Stopped." : (finished ? "Done." : "")));
    if (failure) {
      const list2 = liveList();
      const item = document.createElement("li");
      item.innerHTML = '<p class="error" role="alert"></p>';
      item.firstChild.textContent = failure;
      list2.appendChild(item);
    }
  }

  async function cancel(uuid) {
    const response = await fetch("/ui/conversations/" + encodeURIComponent(uuid) + "/cancel", { method: "POST" });
    if (!response.ok) status("Could not stop the turn (" + response.status + ").");
  }

  function stop() {
    // Stop: the running turn is cancelled; it keeps the part of the answer already written.
    if (!running || running.stopped) return;
    running.stopped = true;
    status("Stopping…");
    if (running.uuid) cancel(running.uuid);
    else running.controller.abort();
  }

  function submit(event) {
    event.preventDefault();
    const box = $("#prompt");
    const text = box.value.trim();
    if (!text) { box.focus(); return false; }
    box.value = "";
    send(text, current());
    return false;
  }

  async function postForm(url, data) {
    const response = await fetch(url, { method: "POST", body: data });
    let body = null;
    try { body = await response.json(); } catch (e) { body = null; }
    if (!response.ok) throw new Error(problemText(body, "Refused (" + response.status + ")."));
    return body;
  }

  async function edit(event) {
    event.preventDefault();
    const form = event.target;
    const data = new FormData(form);
    data.set("op", event.submitter ? event.submitter.value : "save");
    await promptOp(form.dataset.sequence, data);
    return false;
  }

  async function op(button, name) {
    const data = new FormData();
    data.set("op", name);
    await promptOp(button.dataset.sequence, data);
  }

  async function promptOp(sequence, data) {
    const uuid = current();
    try {
      const done = await postForm("/ui/conversations/" + uuid + "/prompts/" + sequence, data);
      if (done.conversation !== uuid) { await load(done.conversation); await refreshList(done.conversation); }
      if (done.submit) await send(done.submit, done.conversation);
    } catch (error) {
      status(error.message);
    }
  }

  async function post(event) {
    event.preventDefault();
    const form = event.target;
    const error = form.querySelector(".error");
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    status("Sending…");
    try {
      await postForm(form.dataset.jsonPost, new FormData(form));
      await load(current());
      await refreshList(current());
      status("Done.");
    } catch (e) {
      button.disabled = false;
      status("");
      if (error) { error.hidden = false; error.textContent = e.message; }
    }
    return false;
  }

  function retarget(select) {
    window.location.href = "/playground?target=" + encodeURIComponent(select.value);
  }

  function useTemplate() { status("The template's values go with your next prompt."); $("#prompt").focus(); }

  async function copyText(text, button) {
    await navigator.clipboard.writeText(text);
    const label = button.textContent;
    button.textContent = "Copied";
    setTimeout(() => { button.textContent = label; }, 1500);
  }

  // Copy: the answer as the model wrote it (its Markdown source), not the rendered page.
  function copyAnswer(button) {
    const text = button.closest(".bubble").querySelector("[data-markdown]");
    copyText(text.dataset.source || text.textContent, button).catch((e) => status("Could not copy: " + e.message));
  }

  return { submit, send, stop, edit, op, post, retarget, useTemplate, load, copyAnswer, copyText, plainDecimal, statusName };
})();
window.Playground = Playground;

// Answers are Markdown: rendered by marked, then sanitised by DOMPurify (an answer can hold
// any text a model or a document put there: no script, handler or javascript: link survives,
// and no image, which would fetch an address the model chose: a way to leak the chat),
// then code blocks highlighted by highlight.js, each with its own Copy button.
// While an answer streams it is rendered the same way as it grows (sanitised each time),
// at most once per animation frame; highlighting and the Copy buttons come when it ends.
const Markdown = (() => {
  const FORBID = ["style", "form", "input", "textarea", "button", "img", "video", "audio", "iframe"];
  function ready() { return Boolean(window.marked && window.DOMPurify); }
  function html(source) {
    const raw = window.marked.parse(source, { gfm: true, breaks: false, async: false });
    return window.DOMPurify.sanitize(raw, { USE_PROFILES: { html: true }, FORBID_TAGS: FORBID });
  }
  function safeLinks(element) {
    element.querySelectorAll("a[href]").forEach((link) => { link.rel = "noopener noreferrer nofollow"; link.target = "_blank"; });
  }
  // Render an element's Markdown: its text, or ``source`` when given (a streamed answer's end).
  function render(element, source) {
    if (!ready()) return;
    if (source === undefined) {
      if (element.dataset.rendered) return;
      source = element.textContent;
    }
    element.dataset.source = source;
    element.innerHTML = html(source);
    safeLinks(element);
    element.querySelectorAll("pre > code").forEach((code) => {
      if (window.hljs) window.hljs.highlightElement(code);
      const pre = code.parentElement;
      pre.tabIndex = 0;
      const button = document.createElement("button");
      button.type = "button";
      button.className = "small copy-code";
      button.textContent = "Copy code";
      button.addEventListener("click", () => Playground.copyText(code.textContent, button).catch(() => { button.textContent = "Could not copy"; }));
      pre.before(button);
    });
    element.classList.add("rendered");
    element.dataset.rendered = "1";
    delete element.dataset.streaming;
  }
  // A streaming answer so far: ``source`` is all its text yet. Renders on the next frame
  // (many deltas arrive per frame); a final render() that came first wins.
  function stream(element, source) {
    element.dataset.source = source;
    if (!ready()) { element.textContent = source; return; }
    element.dataset.streaming = "1";
    if (element.dataset.pending) return;
    element.dataset.pending = "1";
    requestAnimationFrame(() => {
      delete element.dataset.pending;
      if (element.dataset.rendered) return;
      element.innerHTML = html(element.dataset.source);
      safeLinks(element);
      element.classList.add("rendered");
      // How many times the growing answer was rendered (read by the browser test).
      element.dataset.renders = String(Number(element.dataset.renders || 0) + 1);
    });
  }
  function renderAll(root) { (root || document).querySelectorAll("[data-markdown]:not([data-streaming])").forEach((e) => render(e)); }
  return { render, stream, renderAll };
})();
window.Markdown = Markdown;
document.addEventListener("DOMContentLoaded", () => Markdown.renderAll(document));
document.addEventListener("htmx:afterSettle", (event) => Markdown.renderAll(event.target));
// A fragment the server could not answer (5xx, or no answer at all) is shown, never dropped.
document.addEventListener("htmx:responseError", (event) => {
  const box = document.getElementById("ui-error");
  if (!box) return;
  box.textContent = "The server could not answer (" + event.detail.xhr.status + "). Try again.";
  box.hidden = false;
});
document.addEventListener("htmx:sendError", () => {
  const box = document.getElementById("ui-error");
  if (!box) return;
  box.textContent = "The server did not answer: check the connection and try again.";
  box.hidden = false;
});
