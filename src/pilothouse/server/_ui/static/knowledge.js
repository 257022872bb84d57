// The knowledge page's upload: the files go up with XMLHttpRequest (fetch reports no upload
// progress), and the answer, Server-Sent Events of the ingestion's steps, is read as it grows.
// The bar's first half is the upload, its second the documents read, chunked and embedded.
"use strict";
const Knowledge = (() => {
  const $ = (selector) => document.querySelector(selector);

  function note(text, cls) {
    const item = document.createElement("li");
    if (cls) item.className = cls;
    item.textContent = text;
    $("#upload-log").appendChild(item);
  }

  function step(event, bar) {
    if (event.event === "started") note(event.source + ": reading…");
    else if (event.event === "embedding") $("#upload-status").textContent = event.source + ": " + event.embedded + " of " + event.chunks + " chunks embedded";
    else if (event.event === "done") note(event.source + ": " + event.status + ", " + event.chunks + " chunks", "done");
    else if (event.event === "failed") note(event.source + ": failed: " + (event.error || ""), "error");
    if (event.total && (event.event === "done" || event.event === "failed")) {
      bar.value = 50 + Math.round((50 * event.index) / event.total);
    }
  }

  function upload(event) {
    event.preventDefault();
    const form = event.target;
    const bar = $("#upload-progress");
    const status = $("#upload-status");
    $("#upload-progress-box").hidden = false;
    $("#upload-log").replaceChildren();
    bar.value = 0;
    status.textContent = "Uploading…";
    $("#upload-send").disabled = true;
    const xhr = new XMLHttpRequest();
    xhr.open("POST", form.dataset.url);
    xhr.setRequestHeader("Accept", "text/event-stream");
    let seen = 0;
    let failure = null;
    let result = null;
    function read() {
      const text = xhr.responseText;
      let cut;
      while ((cut = text.indexOf("\n\n", seen)) >= 0) {
        const frame = text.slice(seen, cut);
        seen = cut + 2;
        let name = "message"; let data = "";
        for (const line of frame.split("\n")) {
          if (line.startsWith("event: ")) name = line.slice(7);
          else if (line.startsWith("data: ")) data += line.slice(6);
        }
        const payload = data ? JSON.parse(data) : {};
        if (name === "progress") step(payload, bar);
        else if (name === "result") result = payload;
        else if (name === "error") failure = payload.detail;
      }
    }
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) bar.value = Math.round((50 * e.loaded) / e.total);
    };
    xhr.upload.onload = () => { bar.value = 50; status.textContent = "Reading, chunking and embedding…"; };
    xhr.onprogress = () => { if (xhr.status === 200) read(); };
    xhr.onloadend = async () => {
      $("#upload-send").disabled = false;
      if (xhr.status !== 200) {
        let body = null;
        try { body = JSON.parse(xhr.responseText); } catch (e) { body = null; }
        failure = (body && (body.detail || body.title)) || ("The upload was refused (" + (xhr.status || "no answer") + ").");
      } else {
        read();
      }
      if (failure || !result) {
        status.textContent = "";
        note(failure || "The upload ended without a result.", "error");
        const last = $("#upload-log").lastChild;
        last.setAttribute("role", "alert");
        return;
      }
      bar.value = 100;
      const count = (s) => result.documents.filter((d) => d.status === s).length;
      status.textContent = "Done: " + count("added") + " added, " + count("replaced") + " replaced, " +
        count("unchanged") + " unchanged, " + count("failed") + " failed.";
      form.reset();
      await htmx.ajax("GET", "/ui/knowledge/" + encodeURIComponent($(".knowledge").dataset.collection) + "/documents", { target: "#documents" });
      document.body.dataset.uploads = String(Number(document.body.dataset.uploads || 0) + 1);
    };
    xhr.send(new FormData(form));
    return false;
  }

  return { upload };
})();
window.Knowledge = Knowledge;
