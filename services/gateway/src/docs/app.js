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

// The document being shown, for resolving `$ref`s.
let spec = {};

// A response or parameter the document states once, under `components`, and refers to.
function shared(item) {
  const ref = item && item.$ref;
  if (typeof ref !== "string") return item || {};
  const [, kind, name] = ref.match(/^#\/components\/(responses|parameters)\/(.+)$/) || [];
  return (kind && ((spec.components || {})[kind] || {})[name]) || {};
}

// `#/components/schemas/Name` → [Name, its schema]; anything else → [null, schema].
function resolve(schema) {
  const ref = schema && schema.$ref;
  if (typeof ref !== "string" || !ref.startsWith("#/components/schemas/")) return [null, schema || {}];
  const name = ref.slice("#/components/schemas/".length);
  const target = ((spec.components || {}).schemas || {})[name];
  return [name, target || {}];
}

// One line saying what a value is: its type (or the schema it names), and the rules the schema
// states (enum, pattern, bounds), as a reader needs them to write a valid request.
function summary(schema) {
  const [name, resolved] = resolve(schema);
  const parts = [];
  if (name) parts.push(name);
  let type = resolved.type;
  if (Array.isArray(type)) type = type.join(" | ");
  if (type === "array") {
    const [itemName, items] = resolve(resolved.items);
    type = "array of " + (itemName || (Array.isArray(items.type) ? items.type.join(" | ") : items.type) || "values");
  }
  if (type && !(name && type === "object")) parts.push(type);
  if (resolved.format) parts.push(resolved.format);
  if (resolved.enum) parts.push("one of " + resolved.enum.map((v) => JSON.stringify(v)).join(", "));
  if (resolved.const !== undefined) parts.push("= " + JSON.stringify(resolved.const));
  if (resolved.pattern) parts.push("pattern " + resolved.pattern);
  for (const [key, label] of [["minimum", "≥"], ["maximum", "≤"], ["minLength", "length ≥"],
    ["maxLength", "length ≤"], ["minItems", "items ≥"], ["maxItems", "items ≤"]]) {
    if (resolved[key] !== undefined) parts.push(label + " " + resolved[key]);
  }
  if (resolved.default !== undefined) parts.push("default " + JSON.stringify(resolved.default));
  if (!parts.length) {
    // `Labels | null`, as the generated documents write an optional reference.
    const alternatives = resolved.oneOf || resolved.anyOf;
    if (Array.isArray(alternatives)) return alternatives.map(summary).join(" | ");
  }
  return parts.join(", ") || "any";
}

// A schema's fields as a nested list: name (* when required), what it is, its description. Schemas
// that refer to themselves, or nest deeper than a reader follows, are named rather than expanded.
function schemaView(schema, depth, seen) {
  const [name, resolved] = resolve(schema);
  if (name && seen.has(name)) return null;
  const inner = new Set(seen);
  if (name) inner.add(name);
  const body = resolved.type === "array" || (Array.isArray(resolved.type) && resolved.type.includes("array"))
    ? resolve(resolved.items)[1] : resolved;
  const list = element("ul", { class: "fields" });
  const required = new Set(body.required || []);
  for (const [field, fieldSchema] of Object.entries(body.properties || {})) {
    const [, fieldResolved] = resolve(fieldSchema);
    const item = element("li", { "data-field": field },
      element("code", { text: field + (required.has(field) ? " *" : "") }),
      element("span", { class: "type", text: " " + summary(fieldSchema) }),
      fieldResolved.description || fieldSchema.description
        ? element("div", { class: "description", text: fieldSchema.description || fieldResolved.description })
        : null);
    if (depth < 4) {
      const nested = schemaView(fieldSchema, depth + 1, inner);
      if (nested) item.append(nested);
    }
    list.append(item);
  }
  for (const key of ["oneOf", "anyOf", "allOf"]) {
    if (!Array.isArray(body[key])) continue;
    const alternatives = element("li", { text: key === "allOf" ? "all of:" : "one of:" });
    const options = element("ul", { class: "fields" });
    for (const option of body[key]) {
      const entry = element("li", {}, element("span", { class: "type", text: summary(option) }));
      if (depth < 4) {
        const nested = schemaView(option, depth + 1, inner);
        if (nested) entry.append(nested);
      }
      options.append(entry);
    }
    alternatives.append(options);
    list.append(alternatives);
  }
  return list.childElementCount ? list : null;
}

// What an operation takes (parameters, body) and what it answers (every status, with its schema).
function referenceView(operation) {
  const reference = element("div", { class: "reference" });
  if (operation.description) reference.append(element("p", { class: "description", text: operation.description }));
  const parameters = (operation.parameters || []).map(shared).filter((p) => p.in !== "header" || p.name !== "Authorization");
  if (parameters.length) {
    const list = element("ul", { class: "fields parameters" });
    for (const parameter of parameters) {
      list.append(element("li", { "data-parameter": parameter.name },
        element("code", { text: parameter.name + (parameter.required ? " *" : "") }),
        element("span", { class: "type", text: " (" + parameter.in + ") " + summary(parameter.schema) }),
        parameter.description ? element("div", { class: "description", text: parameter.description }) : null));
    }
    reference.append(element("h4", { text: "Parameters" }), list);
  }
  const request = operation.requestBody && operation.requestBody.content &&
    Object.entries(operation.requestBody.content)[0];
  if (request) {
    const [mediaType, media] = request;
    reference.append(element("h4", { text: "Body (" + mediaType + "): " + summary(media.schema) }));
    if (operation.requestBody.description) {
      reference.append(element("div", { class: "description", text: operation.requestBody.description }));
    }
    const fields = schemaView(media.schema, 0, new Set());
    if (fields) reference.append(element("div", { class: "body" }, fields));
  }
  const responses = element("div", { class: "responses" });
  for (const [code, stated] of Object.entries(operation.responses || {})) {
    const answer = shared(stated);
    const media = answer.content && Object.entries(answer.content)[0];
    const view = element("details", { class: "response", "data-code": code },
      element("summary", {}, element("span", { class: "code", text: code }),
        element("span", { text: " " + (answer.description || "") +
          (media ? " — " + media[0] + ": " + summary(media[1].schema) : "") })));
    if (media) {
      const fields = schemaView(media[1].schema, 0, new Set());
      if (fields) view.append(fields);
    }
    responses.append(view);
  }
  reference.append(element("h4", { text: "Responses" }), responses);
  return reference;
}

// The body a try starts from, and its media type: JSON, else the first the operation takes (a PATCH
// takes only `application/merge-patch+json`).
function bodyMediaType(operation) {
  const content = (operation.requestBody && operation.requestBody.content) || {};
  if (content["application/json"]) return "application/json";
  return Object.keys(content)[0] || null;
}

function exampleBody(operation) {
  const mediaType = bodyMediaType(operation);
  const media = mediaType && operation.requestBody.content[mediaType];
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
    headers["Content-Type"] = body.dataset.mediaType || "application/json";
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
  details.append(referenceView(operation));
  const form = element("form");
  for (const parameter of (operation.parameters || []).map(shared)) {
    if (parameter.in !== "path" && parameter.in !== "query") continue;
    form.append(element("label", { text: parameter.name + (parameter.required ? " *" : "") + " " },
      element("input", { name: parameter.name, "data-in": parameter.in })));
  }
  const body = exampleBody(operation);
  if (body !== null) {
    const area = element("textarea", { name: "body", "data-media-type": bodyMediaType(operation) });
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
  spec = document_;
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
