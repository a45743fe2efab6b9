// mlatr serve's page: text search (GET search), search by sound (POST search/audio), results you can play,
// scrub, loop, copy the path of, drag out as a file (a DAW, a file manager) and collect as picks exported as CSV.
// Everything the server sends is put in the page as text (textContent), never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const form = $("search-form"), q = $("q"), lang = $("lang"), k = $("k"), file = $("file"), drop = $("drop");
const statusLine = $("status"), results = $("results");
let health = null;
let lastQuery = "";  // what the shown results answer (the picks remember it)

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

// What the file is, from its facets: "WAV 44.1 kHz mono" ("" where the index recorded none).
function fmtAudio(r) {
  const rate = r.sample_rate ? `${Number((r.sample_rate / 1000).toFixed(1))} kHz` : "";
  const ch = r.channels === 1 ? "mono" : r.channels === 2 ? "stereo" : r.channels ? `${r.channels} ch` : "";
  return [r.format ? r.format.toUpperCase() : "", rate, ch].filter(Boolean).join(" ");
}

const SVG = "http://www.w3.org/2000/svg";

// A time in a file as a clock: 100 -> "1:40".
function clock(s) {
  const t = Math.round(s * 10) / 10, m = Math.floor(t / 60), sec = t - 60 * m;
  return `${m}:${sec < 10 ? "0" : ""}${Number.isInteger(sec) ? sec : sec.toFixed(1)}`;
}

// Where a library's caption came from (mlatr.data.file_metadata.CAPTION_SOURCES), in a sound designer's words.
const ORIGINS = {bext: "BWF description", ixml: "iXML", info: "RIFF INFO", id3: "ID3 tag", vorbis: "Vorbis comment",
  mp4: "MP4 tag", aiff: "AIFF text", sidecar: "sidecar text", ucs: "UCS name", name: "file name", folder: "folder"};

// What ranked a result (mlatr.search.hybrid), as short chips: the matched caption and its language, the
// query's words found in a caption, the sound's rank.
function evidenceChips(r) {
  const box = document.createElement("div");
  box.className = "evidence";
  if (r.same_audio) {  // the query's own sound: its score of 1.000 is not a similarity
    const same = document.createElement("span");
    same.className = "chip same";
    same.textContent = "your sound: the same audio";
    same.title = "This clip's audio is the sound you searched with, sample for sample";
    box.append(same);
  }
  if (r.start !== null && r.start !== undefined) {  // a long recording: where in it this matched
    const at = document.createElement("span");
    at.className = "chip moment";
    at.textContent = `at ${clock(r.start)}-${clock(r.end)}`;
    at.title = "The part of this recording that matched: play starts there";
    box.append(at);
  }
  (r.evidence || []).forEach((e) => {
    const chip = document.createElement("span");
    chip.className = "chip " + e.source;
    const from = (e.origin ? `, ${ORIGINS[e.origin] || e.origin}` : "") + (e.translation ? ", by the translation" : "");
    if (e.source === "caption") chip.textContent = `caption “${e.text}” (${e.lang}${from})`;
    else if (e.source === "keyword") chip.textContent = `keywords: ${e.terms.join(", ")}${from ? ` (${from.slice(2)})` : ""}`;
    else chip.textContent = `sound #${e.rank}`;
    chip.title = e.source === "sound" ? `cosine ${e.score === null ? "n/a" : e.score.toFixed(3)}`
      : `${e.source} match, #${e.rank} for this query (score ${e.score === null ? "n/a" : e.score.toFixed(3)})`;
    box.append(chip);
  });
  return box;
}

// The clip's waveform (GET clips/waveform/ID): one bar per peak, drawn when the server answers; a line shows
// where the player is, and pressing or dragging on it seeks there (scrubbing).
function thumbnail(r, audio) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "wave");
  svg.setAttribute("viewBox", "0 0 60 20");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("aria-hidden", "true");
  fetch(`clips/waveform/${encodeURIComponent(r.id)}?bins=60`).then(getJSON).then((w) => {
    w.peaks.forEach((p, i) => {
      const bar = document.createElementNS(SVG, "rect");
      const h = Math.max(0.5, p * 20);
      bar.setAttribute("x", String(i));
      bar.setAttribute("width", "0.8");
      bar.setAttribute("y", String((20 - h) / 2));
      bar.setAttribute("height", String(h));
      svg.append(bar);
    });
    svg.dataset.bins = String(w.peaks.length);
    if (r.start !== null && r.start !== undefined && r.duration) {  // the matched segment, marked
      const mark = document.createElementNS(SVG, "rect");
      const x = (60 * r.start) / r.duration, x2 = Math.min(60, (60 * r.end) / r.duration);
      mark.setAttribute("class", "moment");
      mark.setAttribute("x", String(x));
      mark.setAttribute("width", String(Math.max(0.8, x2 - x)));
      mark.setAttribute("y", "0");
      mark.setAttribute("height", "20");
      svg.prepend(mark);
    }
  }).catch(() => { svg.dataset.bins = "0"; });
  const head = document.createElementNS(SVG, "line");
  head.setAttribute("class", "playhead");
  head.setAttribute("y1", "0");
  head.setAttribute("y2", "20");
  head.setAttribute("x1", "-1");
  head.setAttribute("x2", "-1");
  const place = () => {
    const x = r.duration ? String((60 * audio.currentTime) / r.duration) : "-1";
    head.setAttribute("x1", x);
    head.setAttribute("x2", x);
  };
  audio.addEventListener("timeupdate", place);
  audio.addEventListener("seeked", place);
  svg.append(head);
  const scrub = (ev) => {
    if (!r.duration) return;
    const box = svg.getBoundingClientRect();
    seek(audio, (r.duration * Math.max(0, Math.min(box.width, ev.clientX - box.left))) / box.width);
  };
  svg.addEventListener("pointerdown", (ev) => {
    svg.setPointerCapture(ev.pointerId);
    scrub(ev);
    if (audio.paused) audio.play().catch(() => {});
  });
  svg.addEventListener("pointermove", (ev) => { if (ev.buttons & 1) scrub(ev); });
  return svg;
}

// Seek a player to `t` seconds, loading it first when it has not been (its preload is none).
function seek(audio, t) {
  if (audio.readyState >= 1) { audio.currentTime = t; return; }
  audio.preload = "auto";
  audio.addEventListener("loadedmetadata", () => { audio.currentTime = t; }, { once: true });
  audio.load();
}

// ---- results out: a path copied, a file dragged out, picks exported as CSV (the columns of mlatr search --csv,
// mlatr.search.export.CSV_FIELDS)
const CSV_FIELDS = ["query", "rank", "id", "path", "score", "relevance", "duration", "start", "end", "caption"];
const TEXT_FIELDS = ["query", "id", "path", "caption"];
const PICKS_KEY = "mlatr-picks";
const AUDIO_TYPES = { wav: "audio/wav", flac: "audio/flac", ogg: "audio/ogg", oga: "audio/ogg", opus: "audio/ogg",
  mp3: "audio/mpeg", aif: "audio/aiff", aiff: "audio/aiff", m4a: "audio/mp4" };
let picks = new Map();  // id -> the pick's CSV row (an object of CSV_FIELDS)

function fileName(r) {
  return (r.path || r.id).split(/[\\/]/).pop();
}

// A text cell no spreadsheet runs as a formula (OWASP), quoted where CSV needs it.
function csvCell(field, v) {
  if (v === null || v === undefined) return "";
  let text = String(v);
  if (TEXT_FIELDS.includes(field) && /^[=+\-@\t\r]/.test(text)) text = "'" + text;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}

function picksCSV() {
  const lines = [CSV_FIELDS.join(",")];
  picks.forEach((row) => lines.push(CSV_FIELDS.map((f) => csvCell(f, row[f])).join(",")));
  return lines.join("\n") + "\n";
}

function pickRow(r) {
  return { query: lastQuery, rank: r.rank, id: r.id, path: r.path, score: r.score, relevance: r.relevance,
           duration: r.duration, start: r.start, end: r.end, caption: r.caption };
}

// The picks bar: how many, an export link (a blob of picksCSV) and a way to clear them; kept across searches
// and reloads (localStorage).
function showPicks() {
  const bar = $("picks"), link = $("export-picks");
  bar.hidden = picks.size === 0;
  $("picks-count").textContent = `${picks.size} pick${picks.size === 1 ? "" : "s"}`;
  if (link.href.startsWith("blob:")) URL.revokeObjectURL(link.href);
  link.href = URL.createObjectURL(new Blob([picksCSV()], { type: "text/csv" }));
  try { localStorage.setItem(PICKS_KEY, JSON.stringify([...picks.values()])); } catch (e) { /* private mode */ }
  document.querySelectorAll("#results .result").forEach((li) => {
    const b = li.querySelector("button.pick");
    const on = picks.has(li.dataset.id);
    b.setAttribute("aria-pressed", String(on));
    b.textContent = on ? "★" : "☆";
  });
}

function togglePick(r) {
  if (picks.has(r.id)) picks.delete(r.id); else picks.set(r.id, pickRow(r));
  showPicks();
}

function loadPicks() {
  try {
    const saved = JSON.parse(localStorage.getItem(PICKS_KEY) || "[]");
    picks = new Map(saved.filter((row) => row && typeof row.id === "string").map((row) => [row.id, row]));
  } catch (e) { picks = new Map(); }
  showPicks();
}

async function copyPath(r) {
  try {
    await navigator.clipboard.writeText(r.path);
  } catch (e) {  // no clipboard API (an http page on another host): a selected text area and the copy command
    const area = document.createElement("textarea");
    area.value = r.path;
    document.body.append(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    if (!ok) { say(`Could not copy; the path is ${r.path}`, true); return; }
  }
  say(`Copied ${r.path}`);
}

// A card dragged out of the page is the file: Chrome's DownloadURL (a DAW or a file manager saves it), with
// its URL and path for whatever else it is dropped on.
function dragOut(ev, r) {
  const url = new URL(r.audio_url, location.href).href, name = fileName(r).replaceAll(":", "_");
  const ext = name.includes(".") ? name.split(".").pop().toLowerCase() : "";
  ev.dataTransfer.effectAllowed = "copy";
  ev.dataTransfer.setData("DownloadURL", `${AUDIO_TYPES[ext] || "application/octet-stream"}:${name}:${url}`);
  ev.dataTransfer.setData("text/uri-list", url);
  ev.dataTransfer.setData("text/plain", r.path || url);
}

function button(text, label, onClick) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = "small-button";
  b.textContent = text;
  b.setAttribute("aria-label", label);
  b.addEventListener("click", onClick);
  return b;
}

function card(r, top) {
  const li = document.createElement("li");
  li.className = "result";
  li.dataset.id = r.id;
  const n = document.createElement("span");
  n.className = "n";
  n.textContent = String(r.rank);
  const body = document.createElement("div");
  body.className = "body";
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
  const relText = r.relevance === null || r.relevance === undefined ? "not calibrated" : r.relevance.toFixed(2);
  // the relevance is what a person reads; the ranking's own score (a fused score can be negative) only on hover
  meta.textContent = [r.id, fmtSeconds(r.duration), fmtAudio(r), `relevance ${relText}`].filter(Boolean).join(" · ");
  meta.title = `ranking score ${score}`;
  // relevance: the calibrated probability that the clip answers the query, as a bar and its number
  const bar = document.createElement("div");
  bar.className = "score-bar";
  const fill = document.createElement("span");
  const rel = r.relevance === null || r.relevance === undefined ? 0 : Math.max(0, Math.min(1, r.relevance));
  fill.style.width = `${(100 * rel).toFixed(1)}%`;
  bar.dataset.relevance = rel.toFixed(3);
  bar.title = `relevance ${rel.toFixed(2)}: how probable it is that this clip answers the query`;
  bar.append(fill);
  const details = evidenceChips(r);
  details.append(meta);
  body.append(cap, details);
  const audio = document.createElement("audio");
  audio.preload = "none";
  // a long recording plays from where it matched (a media fragment: the server never sees it)
  audio.src = r.start ? `${r.audio_url}#t=${r.start}` : r.audio_url;
  li.draggable = true;
  li.addEventListener("dragstart", (ev) => dragOut(ev, r));
  const play = button("▶", `Play result ${r.rank}: ${r.caption || r.id}`, () => {
    if (audio.paused) audio.play(); else audio.pause();
  });
  play.classList.add("play");
  audio.addEventListener("play", () => {
    document.querySelectorAll("audio").forEach((a) => { if (a !== audio) a.pause(); });
    document.querySelectorAll(".result.playing").forEach((x) => x.classList.remove("playing"));
    li.classList.add("playing");
    play.textContent = "❚❚";
  });
  audio.addEventListener("pause", () => { li.classList.remove("playing"); play.textContent = "▶"; });
  const download = document.createElement("a");
  download.className = "download";
  download.href = r.audio_url;
  download.download = fileName(r);
  download.textContent = "⤓";
  download.title = "Download";
  download.setAttribute("aria-label", `Download result ${r.rank}`);
  const more = button("≈", `More like result ${r.rank}`, () => searchSimilar(r));
  more.classList.add("more");
  more.title = "More like this";
  // loop: the matched moment of a long recording (back to its start at its end), else the whole clip
  const hasMoment = r.start !== null && r.start !== undefined;
  const loop = button("⟲", `Loop result ${r.rank}`, () => {
    const on = loop.getAttribute("aria-pressed") !== "true";
    loop.setAttribute("aria-pressed", String(on));
    audio.loop = on && !hasMoment;
  });
  loop.classList.add("loop");
  loop.setAttribute("aria-pressed", "false");
  loop.title = hasMoment ? `Loop ${clock(r.start)}-${clock(r.end)}` : "Loop";
  audio.addEventListener("timeupdate", () => {
    if (hasMoment && !audio.paused && loop.getAttribute("aria-pressed") === "true" && audio.currentTime >= r.end) {
      audio.currentTime = r.start;
    }
  });
  const copy = button("path", `Copy the path of result ${r.rank}`, () => copyPath(r));
  copy.classList.add("copy");
  copy.title = "Copy path";
  const pick = button("☆", `Pick result ${r.rank}`, () => togglePick(r));
  pick.classList.add("pick");
  pick.title = "Pick (export the picks as CSV)";
  pick.setAttribute("aria-pressed", String(picks.has(r.id)));
  if (picks.has(r.id)) pick.textContent = "★";
  const actions = document.createElement("div");
  actions.className = "actions";
  actions.append(play, loop, more, copy, pick, download);
  li.append(n, thumbnail(r, audio), body, bar, actions, audio);
  return li;
}

// "relevance 0.457, below 0.460": the fewest decimals (2 to 6) at which the shown value is below the shown level
// (mlatr.search.results.below_words), so that what is read is true
function belowWords(value, level) {
  for (let digits = 2; digits <= 6; digits++) {
    const shown = value.toFixed(digits), at = level.toFixed(digits);
    if (Number(shown) < Number(at)) return `relevance ${shown}, below ${at}`;
  }
  return `relevance ${value.toFixed(6)}, just below ${level.toFixed(6)}`;
}

function show(data, what) {
  results.replaceChildren();
  const top = data.results.length && data.results[0].score !== null ? data.results[0].score : 0;
  // cut-off: in a fused ranking, after the last result a caption or keyword matched, only sound speaks
  const text = (r) => (r.evidence || []).some((e) => e.source !== "sound");
  const cut = data.rank === "hybrid" ? data.results.map(text).lastIndexOf(true) + 1 : -1;
  if (data.calibrated === false && data.results.length) {
    const li = document.createElement("li");
    li.className = "nothing-relevant";
    li.id = "uncalibrated";
    li.textContent = `Relevance is not calibrated for this model (${data.uncalibrated}): the sounds are ranked, ` +
      "without a probability.";
    results.append(li);
  }
  if (data.translated_query) {
    const li = document.createElement("li");
    li.className = "translated";
    li.id = "translated-query";
    li.textContent = `Also read as its translation: “${data.translated_query}”`;
    results.append(li);
  }
  if (data.nothing_relevant && data.results.length) {
    const li = document.createElement("li");
    li.className = "nothing-relevant";
    li.id = "nothing-relevant";
    const level = data.relevance === null || data.relevance === undefined || data.min_relevance === null ? "" :
      ` (${belowWords(data.relevance, data.min_relevance)})`;
    li.textContent = `Nothing in this library seems to match${level}. The closest sounds:`;
    results.append(li);
  }
  data.results.forEach((r, i) => {
    if (i === cut && i > 0) {
      const li = document.createElement("li");
      li.className = "cutoff";
      li.textContent = "Below: matched by sound only, no caption says so";
      results.append(li);
    }
    results.append(card(r, top));
  });
  const near = $("nearest-captions");
  near.hidden = !(data.captions && data.captions.length);
  near.textContent = near.hidden ? "" : "Captions closest to this sound: " +
    data.captions.slice(0, 5).map((c) => `“${c.text}” (${c.lang})`).join(", ");
  const n = data.results.length;
  say(n ? `${n} result${n > 1 ? "s" : ""} for ${what} (${Math.round(data.took_ms)} ms)` : `Nothing found for ${what}.`);
}

// A fetch that failed before any answer (server down, network gone) says so in words.
function failed(e) {
  results.replaceChildren();
  $("nearest-captions").hidden = true;
  if (e instanceof TypeError) {
    say("Cannot reach the search server: it may have stopped, or the network is down. Check that " +
        "mlatr serve is running, then try again.", true);
  } else {
    say(e.message, true);
  }
}

// "More like this": the query is now the clip, in the box (like:ID, which a search of the box repeats) and in
// the URL (?like=ID&k=N), so the result can be shared and reloaded.
const LIKE = "like:";

async function searchSimilar(r, remember = true) {
  q.value = LIKE + r.id;
  const page = new URLSearchParams({ like: r.id, k: k.value });
  const request = new URLSearchParams({ k: k.value });
  addFilters(request, page);  // the filter controls narrow "more like this" as they do a sound search
  request.delete("include_silent");  // a sound query keeps silent clips
  if (remember) history.replaceState(null, "", "?" + page.toString());
  say(`Looking for sounds like ${r.caption || r.id}…`);
  $("query-sound").hidden = true;
  lastQuery = LIKE + r.id;
  try {
    show(await getJSON(await fetch(`clips/similar/${encodeURIComponent(r.id)}?` + request.toString())),
         `sounds like “${r.caption || r.id}”`);
  } catch (e) { failed(e); }
}

// The filter controls beside the search box, as one filter (mlatr.search.filters) and as the page's URL
// parameters (each control its own, so a shared link restores them).
const FILTER_PARAMS = { dmin: "dmin", dmax: "dmax", channels: "ch", format: "fmt", "library-filter": "lib", where: "where" };

function quoted(text) {
  return '"' + text.replace(/\\/g, "\\\\").replace(/"/g, '\\"') + '"';
}

function filterText() {
  const parts = [];
  const dmin = $("dmin").value.trim(), dmax = $("dmax").value.trim();
  if (dmin && Number.isFinite(Number(dmin))) parts.push(`duration>=${Number(dmin)}`);
  if (dmax && Number.isFinite(Number(dmax))) parts.push(`duration<=${Number(dmax)}`);
  if ($("channels").value) parts.push(`channels=${$("channels").value}`);
  if ($("format").value) parts.push(`format=${$("format").value}`);
  const library = $("library-filter").value.trim();
  if (library) parts.push(`library=${quoted(library)}`);
  const more = $("where").value.trim();
  if (more) parts.push(parts.length ? `(${more})` : more);
  $("filter-count").textContent = parts.length || $("include-silent").checked ?
    `(${parts.length + ($("include-silent").checked ? 1 : 0)} set)` : "";
  return parts.join(" and ");
}

// The request's filter parameters (where, include_silent) added to ``request``, and the controls' own to ``page``.
function addFilters(request, page) {
  const where = filterText();
  if (where) request.set("where", where);
  if ($("include-silent").checked) request.set("include_silent", "true");
  if (!page) return;
  Object.entries(FILTER_PARAMS).forEach(([id, key]) => { if ($(id).value.trim()) page.set(key, $(id).value.trim()); });
  if ($("include-silent").checked) page.set("silent", "1");
}

function restoreFilters(params) {
  Object.entries(FILTER_PARAMS).forEach(([id, key]) => {
    const value = params.get(key);
    if (value === null) return;
    const control = $(id);
    if (control.tagName === "SELECT" && ![...control.options].some((o) => o.value === value)) return;
    control.value = value;
  });
  $("include-silent").checked = params.get("silent") === "1";
  if (filterText()) $("filters").open = true;
}

async function searchText(remember = true) {
  const text = q.value.trim();
  if (!text) { say("Type a description of a sound first.", true); q.focus(); return; }
  if (text.startsWith(LIKE) && text.length > LIKE.length) {
    searchSimilar({ id: text.slice(LIKE.length) }, remember);
    return;
  }
  const params = new URLSearchParams({ q: text, k: k.value });
  if (lang.value) params.set("lang", lang.value);
  if ($("rank").value !== "hybrid") params.set("rank", $("rank").value);
  const request = new URLSearchParams(params);
  addFilters(request, params);
  $("query-sound").hidden = true;
  if (remember) history.replaceState(null, "", "?" + params.toString());
  say("Searching…");
  lastQuery = text;
  try {
    show(await getJSON(await fetch("search?" + request.toString())), `“${text}”`);
  } catch (e) { failed(e); }
}

async function searchSound(f) {
  if (!f) return;
  if (health && f.size > health.max_upload_bytes) {
    say(`${f.name} is too large (${(f.size / 2 ** 20).toFixed(1)} MiB; the limit is ` +
        `${(health.max_upload_bytes / 2 ** 20).toFixed(1)} MiB).`, true);
    forgetUpload();
    return;
  }
  const body = new FormData();
  body.append("file", f, f.name);
  // the query is now this sound: it can be played back, and the text box no longer pretends otherwise
  q.value = "";
  history.replaceState(null, "", location.pathname);
  const player = $("query-audio");
  if (player.src.startsWith("blob:")) URL.revokeObjectURL(player.src);
  player.src = URL.createObjectURL(f);
  $("query-sound").hidden = false;
  say(`Listening to ${f.name}…`);
  lastQuery = f.name;
  try {
    const request = new URLSearchParams({ k: k.value });
    const where = filterText();
    if (where) request.set("where", where);
    const data = await getJSON(await fetch("search/audio?" + request.toString(), { method: "POST", body }));
    show(data, `the sound ${f.name}`);
  } catch (e) {
    failed(e);
    forgetUpload();
  }
}

// A refused upload leaves nothing behind: its player is hidden and the picker is emptied (the same file,
// fixed, can be picked again); its error goes as soon as the person does something else.
function forgetUpload() {
  $("query-sound").hidden = true;
  file.value = "";
}

function clearError() {
  if (statusLine.classList.contains("error")) say("");
}

// The picker tells the truth: an encoder that ignores the language gets "any language" selected and a
// note saying so; only one that reads it gets the browser's language preselected.
function fillLanguages(h) {
  lang.replaceChildren();
  const note = $("lang-note");
  const names = (codes) => codes.map((c) => (h.languages.find((l) => l.code === c) || { name: c }).name).join(", ");
  const translated = (h.translates || []).length ? `but for ${names(h.translates)}, read also through a ` +
    `translation into ${names([h.caption_language])}.` : "";
  if (!h.language_required) {
    lang.append(new Option("Any language (not needed)", ""));
    note.textContent = `This library's text encoder${h.text_encoder ? ` (${h.text_encoder})` : ""} reads every ` +
      "language alike: the language you pick does not change the results" +
      (translated ? ` ${translated}` : "; it only chooses which captions are shown.");
    note.hidden = false;
  } else if (translated) {
    note.textContent = `Queries are read in the language you pick, ${translated}`;
    note.hidden = false;
  } else {
    note.hidden = true;
  }
  h.languages.forEach((l) => lang.append(new Option(`${l.name} (${l.code})`, l.code)));
  if (h.language_required) {
    const browser = (navigator.language || "").slice(0, 2).toLowerCase();
    const mine = h.languages.find((l) => l.alias === browser);
    if (mine) lang.value = mine.code;
  }
}

async function start() {
  try {
    health = await getJSON(await fetch("health"));
  } catch (e) {
    const why = e instanceof TypeError ? "the search server cannot be reached" : e.message;
    $("library").textContent = "The library is not available: " + why;
    failed(e);
    return;
  }
  fillLanguages(health);
  loadPicks();
  $("library").textContent = `${health.clips.toLocaleString()} sounds in ${health.index}` +
    (health.text_encoder ? ` · text encoder ${health.text_encoder}` : "") +
    (health.language_required ? " · pick the query's language" : "");
  q.maxLength = health.max_query_chars;
  const params = new URLSearchParams(location.search);
  if (params.get("lang") !== null && [...lang.options].some((o) => o.value === params.get("lang"))) {
    lang.value = params.get("lang");
  }
  if (params.get("k") && [...k.options].some((o) => o.value === params.get("k"))) k.value = params.get("k");
  if (["audio", "captions"].includes(params.get("rank"))) $("rank").value = params.get("rank");
  restoreFilters(params);
  if (params.get("like")) searchSimilar({ id: params.get("like") }, false);
  else if (params.get("q")) { q.value = params.get("q"); searchText(false); }
  document.body.dataset.ready = "1";
}

$("clear-picks").addEventListener("click", () => { picks.clear(); showPicks(); });
form.addEventListener("submit", (ev) => { ev.preventDefault(); searchText(); });
file.addEventListener("change", () => { searchSound(file.files[0]); });
q.addEventListener("input", clearError);
[lang, k, $("rank")].forEach((s) => s.addEventListener("change", clearError));
Object.keys(FILTER_PARAMS).concat(["include-silent"]).forEach((id) => $(id).addEventListener("change", () => {
  clearError();
  filterText();
}));
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
    const item = results.querySelectorAll(".result")[Number(ev.key) - 1];
    if (item) { ev.preventDefault(); item.querySelector(".play").click(); item.querySelector(".play").focus(); }
  }
});
start();
