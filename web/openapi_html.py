#!/usr/bin/env python3
"""openapi_html.py -- renders proto/openapi.yaml as one self-contained HTML page, the API
reference vbmemd serves at GET /ui/api.html (meson custom_target 'api-html'; web/embed.py
compiles it into the binary). No script, no font, nothing fetched from elsewhere: it reads
offline. Every operation (method, path, summary, description, parameters, request body,
responses) and every schema of components (its members, their types, constraints and
descriptions) is shown; $refs become links.

    python3 web/openapi_html.py proto/openapi.yaml OUT.html
"""
import html
import re
import sys

import yaml

METHODS = ("get", "put", "post", "delete", "patch", "options", "head")

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1d1d1f; }
header { background: #24324a; color: #fff; padding: 1em 2em; }
header a { color: #cfe0ff; }
main { display: flex; }
nav { width: 23em; white-space: nowrap; flex: none; padding: 1em; border-right: 1px solid #ddd; font-size: 13px;
      position: sticky; top: 0; height: 100vh; overflow: auto; box-sizing: border-box; }
nav ul { list-style: none; padding-left: 0.5em; margin: 0.2em 0 1em; }
article { padding: 1em 2em 4em; min-width: 0; max-width: 64em; }
section.op { border: 1px solid #ddd; border-radius: 6px; margin: 1.2em 0; padding: 0.4em 1em 0.8em; }
.m { display: inline-block; min-width: 4.2em; font-weight: bold; font-family: monospace; }
.get { color: #1a6e2e; } .post { color: #1f4fa8; } .put { color: #8a5a00; } .delete { color: #a82020; }
code, pre { font-family: ui-monospace, monospace; font-size: 13px; }
pre { background: #f5f5f7; padding: 0.6em; overflow: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: 0.4em 0; }
td, th { border: 1px solid #ddd; padding: 0.25em 0.5em; vertical-align: top; text-align: left; }
th { background: #f5f5f7; }
.req { color: #a82020; font-size: 12px; }
.desc p { margin: 0.3em 0; }
h3 { margin: 0.5em 0 0.2em; font-size: 16px; }
h4 { margin: 0.8em 0 0.2em; font-size: 14px; }
"""


def esc(s):
    return html.escape(str(s), quote=True)


def emphasis(s):
    """Markdown's **strong** and *emphasis* of a description, outside code spans."""
    s = re.sub(r"\*\*(\S(?:.*?\S)?)\*\*", r"<b>\1</b>", s)
    return re.sub(r"(?<![\w*])\*(\S(?:[^*]*?\S)?)\*(?![\w*])", r"<i>\1</i>", s)


def text(s):
    """A description: paragraphs, `code` spans kept as code."""
    if s is None:
        return ""
    out = []
    for para in str(s).strip().split("\n\n"):
        parts = esc(" ".join(para.split())).split("`")
        para = "".join(("<code>%s</code>" % p) if i % 2 else emphasis(p) for i, p in enumerate(parts))
        out.append("<p>%s</p>" % para)
    return '<div class="desc">%s</div>' % "".join(out)


def ref_name(ref):
    return ref.rsplit("/", 1)[-1]


def anchor(kind, name):
    return "%s-%s" % (kind, "".join(c if c.isalnum() else "-" for c in name))


def type_of(schema):
    """A short HTML description of a schema's type (links for $refs)."""
    if schema is None:
        return ""
    if not isinstance(schema, dict):
        return esc(schema)
    if "$ref" in schema:
        r = schema["$ref"]
        kind = r.split("/")[-2]
        return '<a href="#%s">%s</a>' % (anchor(kind, ref_name(r)), esc(ref_name(r)))
    for comb in ("oneOf", "anyOf", "allOf"):
        if comb in schema:
            sep = " and " if comb == "allOf" else " or "
            return sep.join(type_of(s) for s in schema[comb])
    t = schema.get("type", "")
    if isinstance(t, list):
        t = " or ".join(t)
    if t == "array":
        return "array of " + (type_of(schema.get("items")) or "values")
    if "enum" in schema:
        return esc(t) + " (one of " + ", ".join("<code>%s</code>" % esc(v) for v in schema["enum"]) + ")"
    if "const" in schema:
        return esc(t) + " <code>%s</code>" % esc(schema["const"])
    if t == "object" and "properties" in schema:
        return "object (" + ", ".join("<code>%s</code>" % esc(k) for k in schema["properties"]) + ")"
    return esc(t or "any")


def constraints(schema):
    if not isinstance(schema, dict):
        return ""
    keys = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength",
            "minItems", "maxItems", "pattern", "default", "format")
    parts = ["%s %s" % (k, esc(schema[k])) for k in keys if k in schema]
    return "; ".join(parts)


def schema_table(schema):
    """The members of an object schema as a table (or its type when it is not an object)."""
    if not isinstance(schema, dict):
        return ""
    out = []
    if "properties" in schema:
        req = set(schema.get("required", []))
        out.append("<table><tr><th>member</th><th>type</th><th>constraints</th><th>description</th></tr>")
        for name, p in schema["properties"].items():
            out.append("<tr><td><code>%s</code>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
                esc(name), ' <span class="req">required</span>' if name in req else "",
                type_of(p), constraints(p), text(p.get("description") if isinstance(p, dict) else "")))
        out.append("</table>")
        extra = schema.get("additionalProperties")
        if extra is False:
            out.append("<p>No other members.</p>")
        elif isinstance(extra, dict):
            out.append("<p>Other members: %s</p>" % type_of(extra))
    else:
        c = constraints(schema)
        out.append("<p>Type: %s%s</p>" % (type_of(schema), ("; " + c) if c else ""))
    return "".join(out)


def content(c):
    """A content map (media type -> schema) as lines."""
    if not c:
        return ""
    return "".join("<p><code>%s</code>: %s</p>" % (esc(mt), type_of((v or {}).get("schema")))
                   for mt, v in c.items())


def resolve(doc, obj):
    while isinstance(obj, dict) and "$ref" in obj:
        node = doc
        for part in obj["$ref"].lstrip("#/").split("/"):
            node = node[part]
        obj = node
    return obj


def operation(doc, path, method, op, common_params):
    out = ['<section class="op" id="%s">' % anchor("op", op.get("operationId", method + path)),
           '<h3><span class="m %s">%s</span> <code>%s</code></h3>' % (method, method.upper(), esc(path))]
    if op.get("summary"):
        out.append(text(op["summary"]))
    if op.get("description"):
        out.append(text(op["description"]))
    if op.get("security") == []:
        out.append("<p><em>No API key needed.</em></p>")
    params = [resolve(doc, p) for p in common_params + op.get("parameters", [])]
    if params:
        out.append("<h4>Parameters</h4><table><tr><th>name</th><th>in</th><th>type</th><th>description</th></tr>")
        for p in params:
            out.append("<tr><td><code>%s</code>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>" % (
                esc(p.get("name")), ' <span class="req">required</span>' if p.get("required") else "",
                esc(p.get("in")), type_of(p.get("schema")), text(p.get("description"))))
        out.append("</table>")
    body = resolve(doc, op.get("requestBody"))
    if body:
        out.append("<h4>Request body</h4>" + text(body.get("description")) + content(body.get("content")))
    out.append("<h4>Responses</h4><table><tr><th>status</th><th>description</th><th>content</th></tr>")
    for status, resp in op.get("responses", {}).items():
        link = ""
        if isinstance(resp, dict) and "$ref" in resp:
            link = ' (<a href="#%s">%s</a>)' % (anchor("responses", ref_name(resp["$ref"])),
                                               esc(ref_name(resp["$ref"])))
        r = resolve(doc, resp) or {}
        out.append("<tr><td><b>%s</b>%s</td><td>%s</td><td>%s</td></tr>" % (
            esc(status), link, text(r.get("description")), content(r.get("content"))))
    out.append("</table></section>")
    return "".join(out)


def render(doc):
    info = doc.get("info", {})
    ops, nav_ops = [], []
    for path, item in doc.get("paths", {}).items():
        common = item.get("parameters", [])
        for method in METHODS:
            if method in item:
                op = item[method]
                ops.append(operation(doc, path, method, op, common))
                nav_ops.append('<li><a href="#%s"><span class="m %s">%s</span>%s</a></li>' % (
                    anchor("op", op.get("operationId", method + path)), method, method.upper(), esc(path)))
    comps = doc.get("components", {})
    sections, nav_schemas = [], []
    for name, schema in comps.get("schemas", {}).items():
        sections.append('<section class="op" id="%s"><h3>%s</h3>%s%s</section>' % (
            anchor("schemas", name), esc(name), text(schema.get("description")), schema_table(schema)))
        nav_schemas.append('<li><a href="#%s">%s</a></li>' % (anchor("schemas", name), esc(name)))
    responses = []
    for name, r in comps.get("responses", {}).items():
        responses.append('<section class="op" id="%s"><h3>%s</h3>%s%s</section>' % (
            anchor("responses", name), esc(name), text(r.get("description")), content(r.get("content"))))
    security = []
    for name, s in comps.get("securitySchemes", {}).items():
        security.append("<p><b>%s</b>: %s %s</p>%s" % (esc(name), esc(s.get("type", "")),
                                                        esc(s.get("scheme", "")), text(s.get("description"))))
    title = "%s %s: HTTP API reference" % (info.get("title", "API"), info.get("version", ""))
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
        "<title>%s</title><style>%s</style></head><body>" % (esc(title), STYLE),
        "<header><h1>%s</h1>%s<p>Rendered from <a href=\"/openapi.yaml\">openapi.yaml</a> "
        "(OpenAPI %s), the one reference of this API. <a href=\"/\">The web page</a>.</p></header>"
        % (esc(title), text(info.get("summary")), esc(doc.get("openapi", ""))),
        "<main><nav><b>Operations</b><ul>%s</ul><b>Schemas</b><ul>%s</ul></nav><article>"
        % ("".join(nav_ops), "".join(nav_schemas)),
        text(info.get("description")),
        "<h2>Authentication</h2>%s" % "".join(security) if security else "",
        "<h2>Operations</h2>", "".join(ops),
        "<h2>Schemas</h2>", "".join(sections),
        "<h2>Shared responses</h2>", "".join(responses),
        "</article></main></body></html>\n"])


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: openapi_html.py OPENAPI.yaml OUT.html\n")
        return 2
    with open(argv[1], encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    with open(argv[2], "w", encoding="utf-8") as f:
        f.write(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
