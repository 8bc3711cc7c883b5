#!/usr/bin/env python3
"""Writes the Kubernetes .proto definitions the simulator's protobuf codec compiles.

Usage: generate.py K8S_PB_SRC K8S_OPENAPI_VERSION_SRC OUT_DIR
  K8S_PB_SRC               the `src` folder of the k8s-pb crate (prost types of the Kubernetes API)
  K8S_OPENAPI_VERSION_SRC  a version folder of the k8s-openapi crate, e.g. `src/v1_36`
  OUT_DIR                  where the .proto files go

The message shapes (field numbers, scalar types, labels, maps, message types) come from the prost
attributes k8s-pb generated from the upstream generated.proto files. prost renames fields to
snake_case, which loses the JSON names (`podIP` becomes `pod_ip`); those are taken back from the
serde field names of the matching k8s-openapi type. A message-typed field that has no JSON name
there, and whose message's fields all appear among the parent's JSON names, is one of Go's inlined (embedded) structs (`Volume.volumeSource`, the selectors'
`localObjectReference`, ...) and is written with `json_name = "-"`, which the codec reads as
"merge this message's fields into the parent object".
"""
import os, re, sys

# Fields and messages of v1.36 that k8s-pb 0.9.0 predates, added as the upstream generator would
# write them. KEP-5866 (sharded list and watch, alpha): `ListMeta.shardInfo`, the selector a
# sharded list was filtered by. Its number (5) is the next free one of ListMeta, as new fields
# are numbered upstream; the upstream .proto of v1.36 was not at hand to confirm it.
ADDED_FIELDS = {
    ("apimachinery/pkg/apis/meta/v1", "ListMeta"): ["  optional ShardInfo shardInfo = 5;"],
}
ADDED_MESSAGES = {
    "apimachinery/pkg/apis/meta/v1": ["message ShardInfo {", "  optional string selector = 1;", "}", ""],
}

PACKAGES = [
    "api/core/v1",
    "api/coordination/v1",
    "apimachinery/pkg/api/resource",
    "apimachinery/pkg/apis/meta/v1",
    "apimachinery/pkg/runtime",
    "apimachinery/pkg/util/intstr",
]

def norm(name):
    return name.replace("_", "").lower()

def package_of(path):
    return "k8s.io." + path.replace("/", ".")

def openapi_names(openapi_dir, pkg):
    """normalized type name -> {normalized field -> json name}"""
    out = {}
    d = os.path.join(openapi_dir, pkg)
    if not os.path.isdir(d):
        return out
    for f in os.listdir(d):
        if not f.endswith(".rs"):
            continue
        text = open(os.path.join(d, f)).read()
        m = re.search(r"pub struct (\w+)", text)
        if not m:
            continue
        fields = {}
        for json, ident in re.findall(r'"([^"]+)" => Field::Key_(\w+),', text):
            fields[norm(ident)] = json
        out[norm(m.group(1))] = fields
    return out

def rust_type_to_proto(rust, pkg):
    rust = re.sub(r"\s+", "", rust)
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        while rust.startswith(wrapper):
            rust = rust[len(wrapper):-1]
    module = pkg.split("/")
    parts = rust.split("::")
    while parts[0] == "super":
        module.pop()
        parts.pop(0)
    return "." + package_of("/".join(module + parts))

def rtype_short(rust):
    return re.sub(r"\s+", "", rust).rstrip(">").split("::")[-1].split("<")[-1]

def camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)

def main():
    pb, openapi, out = sys.argv[1:4]
    os.makedirs(out, exist_ok=True)
    for pkg in PACKAGES:
        text = open(os.path.join(pb, pkg, "mod.rs")).read()
        names = openapi_names(openapi, pkg)
        lines = text.split("\n")
        messages = []
        i = 0
        current = None
        while i < len(lines):
            line = lines[i]
            m = re.match(r"pub struct (\w+) \{", line)
            if m:
                current = (m.group(1), [])
                messages.append(current)
            elif line.strip().startswith("#[prost(") and current is not None:
                attr = line.strip()[len("#[prost("):-2]
                i += 1
                decl = lines[i].strip()
                while not decl.endswith(",") or decl.count("<") != decl.count(">"):
                    i += 1
                    decl += lines[i].strip()
                fm = re.match(r"pub (?:r#)?(\w+):(.*),$", decl)
                fname, rtype = fm.group(1), fm.group(2)
                current[1].append((attr, fname, rtype))
            elif line.startswith("}"):
                current = None
            i += 1
        fields_of = {m: [f for _, f, _ in fs] for m, fs in messages}
        deps = set()
        body = []
        for mname, fields in messages:
            known = names.get(norm(mname))
            body.append("message %s {" % mname)
            for attr, fname, rtype in fields:
                tag = re.search(r'tag = "(\d+)"', attr).group(1)
                json = known.get(norm(fname)) if known else None
                option = ""
                if json is None:
                    child = fields_of.get(rtype_short(rtype))
                    if known is not None and attr.startswith("message") and child and all(
                            norm(c) in known for c in child):
                        json, option = camel(fname), ' [json_name = "-"]'
                    else:
                        json = camel(fname)
                mm = re.match(r'btree_map = "string, (\w+)"', attr)
                if mm:
                    vt = mm.group(1)
                    if vt == "message":
                        inner = re.search(r"BTreeMap<[^,]+,(.*?),?>$", re.sub(r"\s+", "", rtype)).group(1)
                        vt = rust_type_to_proto(inner, pkg)
                    if vt.startswith(".k8s.io.") and not vt.startswith("." + package_of(pkg) + "."):
                        deps.add(vt.rsplit(".", 1)[0][1:])
                    body.append("  map<string, %s> %s = %s;" % (vt, json, tag))
                    continue
                kind = attr.split(",")[0].strip()
                label = "repeated" if "repeated" in attr else "optional"
                if kind == "message":
                    ptype = rust_type_to_proto(rtype, pkg)
                    if not ptype.startswith("." + package_of(pkg) + "."):
                        deps.add(ptype.rsplit(".", 1)[0][1:])
                elif kind.startswith("bytes"):
                    ptype = "bytes"
                else:
                    ptype = kind
                body.append("  %s %s %s = %s%s;" % (label, ptype, json, tag, option))
            body.extend(ADDED_FIELDS.get((pkg, mname), []))
            body.append("}")
            body.append("")
        body.extend(ADDED_MESSAGES.get(pkg, []))
        header = ["// Generated by generate.py from the k8s-pb and k8s-openapi crates; do not edit.",
                  'syntax = "proto2";', "", "package %s;" % package_of(pkg), ""]
        for d in sorted(deps):
            header.append('import "%s/generated.proto";' % d.replace(".", "/", 0).replace("k8s.io.", "", 1).replace(".", "/"))
        header.append("")
        path = os.path.join(out, pkg, "generated.proto")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write("\n".join(header + body))

main()
