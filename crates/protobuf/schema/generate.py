#!/usr/bin/env python3
"""Writes `src/schema/table.rs`: the message table the protobuf decoder walks.

Usage: generate.py K8S_PB_SRC K8S_OPENAPI_VERSION_SRC OUT_FILE [OUT_DECODERS]
  K8S_PB_SRC               the `src` folder of the k8s-pb crate (prost types of the Kubernetes API)
  K8S_OPENAPI_VERSION_SRC  a version folder of the k8s-openapi crate, e.g. `src/v1_36`
  OUT_FILE                 the Rust file to write (`src/schema/table.rs`)
  OUT_DECODERS             the generated decoders to write (`src/typed/generated.rs`, by
                           `decoders.py`, from every version folder beside K8S_OPENAPI_VERSION_SRC)

Then format both with `rustfmt --edition 2024`. From `crates/protobuf`, with the crates in
cargo's registry:

    R=$(echo ~/.cargo/registry/src/*/)
    python3 schema/generate.py $R/k8s-pb-0.9.0/src $R/k8s-openapi-0.29.0/src/v1_36 \
        src/schema/table.rs src/typed/generated.rs
    rustfmt --edition 2024 src/schema/table.rs src/typed/generated.rs

Message shapes (field numbers, scalar types, labels, maps, message types) come from the prost
attributes k8s-pb generated from the upstream `generated.proto` files. prost renames fields to
snake_case; the JSON names (`podIP`, not `pod_ip`) are taken back from the serde field names of
the matching k8s-openapi type. A message-typed field without a JSON name there, whose message's
fields all appear among the parent's JSON names, is one of Go's inlined structs
(`Volume.volumeSource`): the decoder merges its fields into the parent object.
"""
import os, re, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import decoders

# Fields whose Go type is a pointer to a string, where an empty string on the wire is a value
# (`storageClassName: ""` asks for no class). Every other empty string is Go's always-written zero
# of a non-pointer `omitempty` field, which JSON leaves out.
KEEP_EMPTY = {"storageClassName", "volumeAttributesClassName", "ingressClassName",
              "loadBalancerClass", "localhostProfile", "hostnameOverride"}

def norm(name):
    return name.replace("_", "").lower()

def packages(pb):
    for root, _, files in os.walk(pb):
        if "mod.rs" in files:
            rel = os.path.relpath(root, pb)
            text = open(os.path.join(root, "mod.rs")).read()
            if "::prost::Message" in text:
                yield rel

def proto_package(rel):
    # k8s-pb folders are the Go import paths under k8s.io with `-` as `_`.
    return "k8s.io." + rel.replace(os.sep, ".")

def openapi_names(openapi_dir, rel):
    out = {}
    d = os.path.join(openapi_dir, rel)
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

def rust_type_to_full(rust, rel):
    rust = re.sub(r"\s+", "", rust).replace(",>", ">")
    for wrapper in ("::core::option::Option<", "::prost::alloc::vec::Vec<", "::prost::alloc::boxed::Box<"):
        while rust.startswith(wrapper):
            rust = rust[len(wrapper):-1]
    module = rel.split(os.sep)
    parts = rust.split("::")
    while parts[0] == "super":
        module.pop()
        parts.pop(0)
    return proto_package(os.sep.join(module + parts[:-1])) + "." + parts[-1]

def camel(snake):
    head, *rest = snake.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)

def parse(pb, rel):
    lines = open(os.path.join(pb, rel, "mod.rs")).read().split("\n")
    messages, current, i = [], None, 0
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
            current[1].append((attr, fm.group(1), fm.group(2)))
        elif line.startswith("}"):
            current = None
        i += 1
    return messages

# Messages whose JSON form is not an object of their fields.
SPECIAL = {
    "k8s.io.apimachinery.pkg.apis.meta.v1.Time": "Time",
    "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime": "MicroTime",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Duration": "Duration",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1": "RawJson",
    "k8s.io.apimachinery.pkg.runtime.RawExtension": "RawJson",
    "k8s.io.apimachinery.pkg.api.resource.Quantity": "Quantity",
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": "IntOrString",
    "k8s.io.apimachinery.pkg.apis.meta.v1.Verbs": "Items",
}
# By the last part of the name, in every package: wrappers whose JSON form is their content.
SPECIAL_SHORT = {
    "extravalue": "Items",
    "json": "RawJson",
    "jsonschemapropsorbool": "SchemaOrBool",
    "jsonschemapropsorarray": "SchemaOrArray",
    "jsonschemapropsorstringarray": "SchemaOrArray",
}

def special_of(name):
    if name in SPECIAL:
        return SPECIAL[name]
    short = name.rsplit(".", 1)[1].lower()
    if short in SPECIAL_SHORT and (short == "extravalue" or ".apiextensions." in name):
        return SPECIAL_SHORT[short]
    return "None"

SCALARS = {"string": "Str", "bool": "Bool", "int32": "I32", "int64": "I64", "double": "F64",
           "bytes": "Bytes"}

def main():
    pb, openapi, out = sys.argv[1:4]
    parsed = []
    for rel in sorted(packages(pb)):
        parsed.append((rel, parse(pb, rel), openapi_names(openapi, rel)))
    index = {}
    for rel, messages, _ in parsed:
        for name, _ in messages:
            index[proto_package(rel) + "." + name] = len(index)
    rows, shapes = [], []
    for rel, messages, names in parsed:
        fields_of = {m: [f for _, f, _ in fs] for m, fs in messages}
        for mname, fields in messages:
            known = names.get(norm(mname))
            out_fields, shape = [], []
            for attr, fname, rtype in sorted(fields, key=lambda f: int(re.search(r'tag = "(\d+)"', f[0]).group(1))):
                tag = int(re.search(r'tag = "(\d+)"', attr).group(1))
                json = known.get(norm(fname)) if known else None
                inline = False
                if json is None:
                    short = re.sub(r"\s+", "", rtype).rstrip(">").split("::")[-1].split("<")[-1]
                    child = fields_of.get(short)
                    if known is not None and attr.startswith("message") and child and all(
                            norm(c) in known for c in child):
                        inline = True
                    json = camel(fname)
                mm = re.match(r'btree_map = "string, (\w+)"', attr)
                repeated = "repeated" in attr
                msg = None
                if mm:
                    vt = mm.group(1)
                    if vt == "message":
                        inner = re.search(r"BTreeMap<[^,]+,(.*?),?>$", re.sub(r"\s+", "", rtype)).group(1)
                        kind = "Map(&Value::Msg(%d))" % index[rust_type_to_full(inner, rel)]
                    else:
                        kind = "Map(&Value::%s)" % SCALARS[vt]
                else:
                    k = attr.split(",")[0].strip()
                    if k == "message":
                        msg = index[rust_type_to_full(rtype, rel)]
                        kind = "Value(Value::Msg(%d))" % msg
                    else:
                        kind = "Value(Value::%s)" % SCALARS["bytes" if k.startswith("bytes") else k]
                flags = []
                if repeated: flags.append("REPEATED")
                if inline: flags.append("INLINE")
                if json in KEEP_EMPTY: flags.append("KEEP_EMPTY")
                out_fields.append('F { number: %d, name: "%s", kind: %s, flags: %s }' % (
                    tag, json, kind, " | ".join(flags) or "0"))
                shape.append({"number": tag, "json": json, "inline": inline, "msg": msg,
                              "run": bool(repeated or mm)})
            name = proto_package(rel) + "." + mname
            rows.append((name, out_fields))
            shapes.append((name, rel, mname, special_of(name), shape))
    with open(out, "w") as f:
        f.write("// @generated by schema/generate.py from the k8s-pb and k8s-openapi crates; do not edit.\n")
        f.write("// One entry a message of the Kubernetes API: its fields by number, JSON name and kind.\n\n")
        f.write("use super::{Field as F, INLINE, KEEP_EMPTY, Kind::*, Message as M, REPEATED, Special as S, Value};\n\n")
        f.write("pub(super) static MESSAGES: [M; %d] = [\n" % len(rows))
        for name, fields in rows:
            f.write('    M {\n        name: "%s",\n        special: S::%s,\n        fields: &[\n' % (name, special_of(name)))
            for fl in fields:
                f.write("            %s,\n" % fl)
            f.write("        ],\n    },\n")
        f.write("];\n")
    if len(sys.argv) > 4:
        decoders.write(sys.argv[4], shapes, os.path.dirname(os.path.normpath(openapi)))

main()
