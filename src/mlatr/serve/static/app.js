// mlatr serve's page: text search (GET search), search by sound (POST search/audio), results you can play.
// Everything the server sends is put in the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const form = $("search-form"), q = $("q"), lang = $("lang"), k = $("k"), file = $("file"), drop = $("drop");
const statusLine = $("status"), results = $("results");
let health = null;

function say(text, isError = false) {
  statusLine.textContent = text;
  statusLine.classList.toggle("error", isError);
}

async function getJSON(response) {
  let body = null;
  try { body = await response.json(); } catch (e) { /* not JSON: reported below */ }
  if (!response.ok) throw new Error(body && body.error ? body.error : `HTTP ${response.status}`);
  return body;
}

function fmtSeconds(s) {
  if (s === null || s === undefined) return "";
  return s < 60 ? `${s.toFixed(1)} s` : `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

function show(data, what) {
  results.replaceChildren();
  data.results.forEach((r) => {
    const li = document.createElement("li");
    li.className = "result";
    const n = document.createElement("span");
    n.className = "n";
    n.textContent = String(r.rank);
    const cap = document.createElement("div");
    cap.className = "caption";
    cap.textContent = r.caption || r.id;
    if (r.caption_lang && health) {
      const l = health.languages.find((x) => x.code === r.caption_lang);
      if (l && l.alias) cap.lang = l.alias;
    }
    const meta = document.createElement("div");
    meta.className = "meta";
    const score = r.score === null ? "n/a" : r.score.toFixed(3);
    meta.textContent = [r.id, fmtSeconds(r.duration), `score ${score}`].filter(Boolean).join(" · ");
    const audio = document.createElement("audio");
    audio.controls = true;
    audio.preload = "none";
    audio.src = r.audio_url;
    audio.setAttribute("aria-label", `Play result ${r.rank}: ${r.caption || r.id}`);
    audio.addEventListener("play", () => {
      document.querySelectorAll("audio").forEach((a) => { if (a !== audio) a.pause(); });
      document.querySelectorAll(".result.playing").forEach((x) => x.classList.remove("playing"));
      li.classList.add("playing");
    });
    audio.addEventListener("pause", () => li.classList.remove("playing"));
    li.append(n, cap, meta, audio);
    results.append(li);
  });
  if (data.captions && data.captions.length) {
    const li = document.createElement("li");
    li.className = "captions";
    li.textContent = "Captions closest to this sound: " +
      data.captions.slice(0, 3).map((c) => `“${c.text}” (${c.lang})`).join(", ");
    results.append(li);
  }
  const n = data.results.length;
  say(n ? `${n} result${n > 1 ? "s" : ""} for ${what} (${Math.round(data.took_ms)} ms)` : `Nothing found for ${what}.`);
}

async function searchText(remember = true) {
  const text = q.value.trim();
  if (!text) { say("Type a description of a sound first.", true); q.focus(); return; }
  const params = new URLSearchParams({ q: text, k: k.value });
  if (lang.value) params.set("lang", lang.value);
  if (remember) history.replaceState(null, "", "?" + params.toString());
  say("Searching…");
  try {
    show(await getJSON(await fetch("search?" + params.toString())), `“${text}”`);
  } catch (e) {
    results.replaceChildren();
    say(e.message, true);
  }
}

async function searchSound(f) {
  if (!f) return;
  if (health && f.size > health.max_upload_bytes) {
    say(`${f.name} is too large (${(f.size / 2 ** 20).toFixed(1)} MiB; the limit is ` +
        `${(health.max_upload_bytes / 2 ** 20).toFixed(1)} MiB).`, true);
    return;
  }
  const body = new FormData();
  body.append("file", f, f.name);
  say(`Listening to ${f.name}…`);
  try {
    const data = await getJSON(await fetch("search/audio?k=" + encodeURIComponent(k.value), { method: "POST", body }));
    show(data, `the sound ${f.name}`);
  } catch (e) {
    results.replaceChildren();
    say(e.message, true);
  }
}

function fillLanguages(h) {
  lang.replaceChildren();
  if (!h.language_required) {
    const any = new Option("Any language", "");
    lang.append(any);
  }
  h.languages.forEach((l) => lang.append(new Option(`${l.name} (${l.code})`, l.code)));
  const browser = (navigator.language || "").slice(0, 2).toLowerCase();
  const mine = h.languages.find((l) => l.alias === browser);
  if (mine) lang.value = mine.code;
}

async function start() {
  try {
    health = await getJSON(await fetch("health"));
  } catch (e) {
    $("library").textContent = "The library is not available: " + e.message;
    say(e.message, true);
    return;
  }
  fillLanguages(health);
  $("library").textContent = `${health.clips.toLocaleString()} sounds in ${health.index}` +
    (health.text_encoder ? ` · text encoder ${health.text_encoder}` : "") +
    (health.language_required ? " · pick the query's language" : "");
  q.maxLength = health.max_query_chars;
  const params = new URLSearchParams(location.search);
  if (params.get("lang") !== null && [...lang.options].some((o) => o.value === params.get("lang"))) {
    lang.value = params.get("lang");
  }
  if (params.get("k") && [...k.options].some((o) => o.value === params.get("k"))) k.value = params.get("k");
  if (params.get("q")) { q.value = params.get("q"); searchText(false); }
  document.body.dataset.ready = "1";
}

form.addEventListener("submit", (ev) => { ev.preventDefault(); searchText(); });
file.addEventListener("change", () => { searchSound(file.files[0]); });
["dragenter", "dragover"].forEach((t) => document.addEventListener(t, (ev) => {
  ev.preventDefault();
  drop.classList.add("over");
}));
["dragleave", "dragend"].forEach((t) => document.addEventListener(t, () => drop.classList.remove("over")));
document.addEventListener("drop", (ev) => {
  ev.preventDefault();
  drop.classList.remove("over");
  if (ev.dataTransfer && ev.dataTransfer.files.length) searchSound(ev.dataTransfer.files[0]);
});
document.addEventListener("keydown", (ev) => {
  const typing = ["INPUT", "SELECT", "TEXTAREA"].includes(document.activeElement.tagName);
  if (ev.key === "Escape") { document.querySelectorAll("audio").forEach((a) => a.pause()); return; }
  if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
  if (ev.key === "/") { ev.preventDefault(); q.focus(); q.select(); return; }
  if (/^[1-9]$/.test(ev.key)) {
    const audio = results.querySelectorAll("audio")[Number(ev.key) - 1];
    if (audio) { ev.preventDefault(); if (audio.paused) audio.play(); else audio.pause(); audio.focus(); }
  }
});
start();
