// Berth's API explorer: lists every operation of the gateway's merged OpenAPI document and lets a
// person try each one with a bearer token. Everything it needs is served by the gateway itself.
"use strict";

const METHODS = ["get", "put", "post", "delete", "head", "patch"];

function element(tag, attributes, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    if (name === "text") node.textContent = value;
    else node.setAttribute(name, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function exampleBody(operation) {
  const media = operation.requestBody && operation.requestBody.content &&
    operation.requestBody.content["application/json"];
  if (!media) return null;
  if (media.example !== undefined) return JSON.stringify(media.example, null, 2);
  const examples = media.examples && Object.values(media.examples);
  if (examples && examples.length && examples[0].value !== undefined) {
    return JSON.stringify(examples[0].value, null, 2);
  }
  return "{}";
}

async function tryOperation(method, path, form, result) {
  let url = path;
  const query = new URLSearchParams();
  for (const input of form.querySelectorAll("input[data-in]")) {
    if (!input.value) continue;
    if (input.dataset.in === "path") {
      url = url.replace("{" + input.name + "}", encodeURIComponent(input.value));
    } else if (input.dataset.in === "query") {
      query.set(input.name, input.value);
    }
  }
  if ([...query.keys()].length) url += "?" + query.toString();
  const headers = {};
  const token = document.getElementById("token").value.trim();
  if (token) headers["Authorization"] = "Bearer " + token;
  const init = { method: method.toUpperCase(), headers };
  const body = form.querySelector("textarea");
  if (body) {
    headers["Content-Type"] = "application/json";
    init.body = body.value;
  }
  result.textContent = "…";
  try {
    const answer = await fetch(url, init);
    const text = await answer.text();
    let shown = text;
    try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (_) { /* not JSON */ }
    result.textContent = "";
    result.append(element("span", { class: "status", "data-status": String(answer.status),
      text: answer.status + " " + answer.statusText }), "\n" + shown);
  } catch (error) {
    result.textContent = "the call failed: " + error;
  }
}

function operationView(method, path, operation) {
  const id = operation.operationId || method + " " + path;
  const details = element("details", { class: "operation", "data-operation": id });
  details.append(element("summary", {},
    element("span", { class: "method", text: method.toUpperCase() }),
    element("span", { class: "path", text: path }),
    operation["x-berth-scope"] ? element("span", { class: "scope", text: "scope " + operation["x-berth-scope"] }) : null,
    element("div", { text: operation.summary || "" })));
  const form = element("form");
  for (const parameter of operation.parameters || []) {
    if (parameter.in !== "path" && parameter.in !== "query") continue;
    form.append(element("label", { text: parameter.name + (parameter.required ? " *" : "") + " " },
      element("input", { name: parameter.name, "data-in": parameter.in })));
  }
  const body = exampleBody(operation);
  if (body !== null) {
    const area = element("textarea", { name: "body" });
    area.value = body;
    form.append(element("label", { text: "body" }), area);
  }
  const result = element("pre", { class: "result" });
  const button = element("button", { type: "submit", text: "Try it out" });
  form.append(button, result);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    tryOperation(method, path, form, result);
  });
  details.append(form);
  return details;
}

async function main() {
  const tokenInput = document.getElementById("token");
  tokenInput.value = sessionStorage.getItem("berth-token") || "";
  tokenInput.addEventListener("change", () => sessionStorage.setItem("berth-token", tokenInput.value));
  // `#token=…&try=<operationId>` fills the token in and opens that operation's form: a deep link.
  // It never sends anything: a link is not a click, and a page that called the API on load would let
  // anyone who can get a link opened make that call with the opener's token. Only "Try it out"
  // sends. The fragment never reaches a server, and is cleared at once.
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (location.hash) history.replaceState(null, "", location.pathname);
  if (fragment.get("token")) tokenInput.value = fragment.get("token");
  const document_ = await (await fetch("/openapi.json")).json();
  const main = document.getElementById("operations");
  const groups = new Map();
  let count = 0;
  for (const [path, item] of Object.entries(document_.paths || {})) {
    for (const method of METHODS) {
      const operation = item[method];
      if (!operation) continue;
      const group = (operation.tags && operation.tags[0]) || operation["x-berth-upstream"] || "gateway";
      if (!groups.has(group)) groups.set(group, []);
      groups.get(group).push(operationView(method, path, operation));
      count += 1;
    }
  }
  for (const [group, views] of groups) {
    main.append(element("h2", { text: group }), ...views);
  }
  document.getElementById("summary").textContent =
    (document_.info && document_.info.title || "Berth") + ": " + count + " operations";
  document.body.dataset.operations = String(count);
  const wanted = fragment.get("try");
  if (wanted) {
    const view = main.querySelector('details[data-operation="' + CSS.escape(wanted) + '"]');
    if (view) {
      view.open = true;
      view.scrollIntoView();
      view.querySelector("button").focus();
    }
  }
}

main();
