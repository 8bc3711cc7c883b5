"""Writes `src/typed/generated.rs`: a decoder for every k8s-openapi struct the message table has.

Called by `generate.py` with the table it built. For each message of the table whose k8s-openapi
type is a plain struct (in any of the versions k8s-openapi carries: `src/v1_*`), it writes an
`impl Merge` (and `message!`, its `Decode`): the message's field numbers matched to the struct's fields, each written
through `opt` (an `Option` field) or `req` (a required one). The Rust types do the rest (the
hand-written `Decode` impls of `typed/kinds.rs`). Fields and types that exist in some versions
only are gated by `#[cfg(k8s_openapi_minor = "..")]`, which the crate's build script sets from
the version the application picked.

A type whose k8s-openapi `Deserialize` refuses a missing field (`missing_field`: meta/v1
`Condition`, events/v1 `EventSeries`) and every non-struct type a generated field holds (JSON
wrappers, `FieldsV1`, `RawExtension`) keeps serde's decoding: it gets a `Decode` impl that
deserializes through the table-driven deserializer.
"""
import os, re

# Types the hand-written kinds of `typed/kinds.rs` decode.
HAND_WRITTEN = {
    "std::string::String", "bool", "i32", "i64", "f64", "k8s_openapi::ByteString",
    "k8s_openapi::apimachinery::pkg::apis::meta::v1::Time",
    "k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime",
    "k8s_openapi::apimachinery::pkg::api::resource::Quantity",
    "k8s_openapi::apimachinery::pkg::util::intstr::IntOrString",
}
SERDE_ONLY = {"k8s_openapi::serde_json::Value"}
OBJECT_META = "k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta"


def norm(name):
    return name.replace("_", "").lower()


def versions(openapi_root):
    """`(minor, folder)` of every version k8s-openapi carries, oldest first."""
    out = []
    for d in os.listdir(openapi_root):
        m = re.fullmatch(r"v1_(\d+)", d)
        if m:
            out.append((int(m.group(1)), os.path.join(openapi_root, d)))
    return sorted(out)


class Struct:
    def __init__(self, path, fields, names, resource, strict):
        self.path = path          # k8s_openapi::api::core::v1::Pod
        self.fields = fields      # ident -> Rust type
        self.names = names        # JSON name -> ident
        self.resource = resource  # implements k8s_openapi::Resource
        self.strict = strict      # its Deserialize refuses a missing field


def structs_of(version_dir):
    """Every non-generic struct of one k8s-openapi version: `(package dir, norm(name))` -> Struct."""
    out = {}
    for root, _, files in os.walk(version_dir):
        rel = os.path.relpath(root, version_dir)
        for f in files:
            if not f.endswith(".rs") or f == "mod.rs":
                continue
            text = open(os.path.join(root, f)).read()
            m = re.search(r"^pub struct (\w+) \{\n(.*?)^\}", text, re.S | re.M)
            if not m:
                continue
            name = m.group(1)
            fields = {}
            for ident, rtype in re.findall(r"^    pub (\w+): (.*),$", m.group(2), re.M):
                fields[ident] = rtype.replace("crate::", "k8s_openapi::")
            names = dict(re.findall(r'"([^"]+)" => Field::Key_(\w+),', text))
            path = "k8s_openapi::" + "::".join(rel.split(os.sep)) + "::" + name
            resource = ("impl crate::Resource for %s " % name) in text
            strict = "missing_field(" in text
            out[(rel, norm(name))] = Struct(path, fields, names, resource, strict)
    return out


def leaves(rtype):
    """The types a field's Rust type holds, without `Option`, `Vec`, `Box` and `BTreeMap`."""
    t = rtype.replace(" ", "")
    for wrapper in ("Option<", "std::vec::Vec<", "std::boxed::Box<"):
        if t.startswith(wrapper):
            return leaves(t[len(wrapper):-1])
    m = re.fullmatch(r"std::collections::BTreeMap<std::string::String,(.*)>", t)
    if m:
        return leaves(m.group(1))
    return [t]


def cfg(present, all_minors):
    """The `#[cfg]` line for the versions in `present` (none if it is every version)."""
    present = sorted(present)
    if present == all_minors:
        return ""
    if len(present) == 1:
        return '#[cfg(k8s_openapi_minor = "%d")]\n' % present[0]
    return "#[cfg(any(%s))]\n" % ", ".join('k8s_openapi_minor = "%d"' % v for v in present)


def indent(text, n):
    pad = " " * n
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def write(out_path, messages, openapi_root):
    """`messages`: the table, in order: `(full name, package dir, prost name, special, fields)`,
    each field a dict with `number`, `json`, `inline` and `msg` (the index of its message type,
    or None)."""
    minors_dirs = versions(openapi_root)
    minors = [m for m, _ in minors_dirs]
    by_version = {m: structs_of(d) for m, d in minors_dirs}

    def struct(minor, index):
        _, rel, mname, special, _ = messages[index]
        if special != "None":
            return None
        return by_version[minor].get((rel, norm(mname)))

    def arms(index, target, minor, into, seen):
        """The `(message index, number) -> (ident, optional)` of message `index` written into
        `target` (a Struct of version `minor`), through inlined messages."""
        for f in messages[index][4]:
            if f["inline"] and f["msg"] is not None and f["msg"] not in seen:
                arms(f["msg"], target, minor, into, seen | {f["msg"]})
                continue
            ident = target.names.get(f["json"])
            if ident is None or ident not in target.fields:
                continue
            rtype = target.fields[ident]
            into[(index, f["number"])] = (ident, rtype.startswith("Option<"), rtype)

    generated = []   # (index, path, cfg versions, arm lines, has_inline, resource versions, meta number)
    used_leaves = {}  # leaf type -> versions
    generated_paths = {}  # path -> versions where generated
    for index in range(len(messages)):
        present, table = [], {}
        resource_in, meta_number = [], None
        for minor in minors:
            s = struct(minor, index)
            if s is None:
                continue
            if s.strict:
                continue
            present.append(minor)
            into = {}
            arms(index, s, minor, into, {index})
            for key, (ident, optional, rtype) in into.items():
                table.setdefault(key, {}).setdefault((ident, optional), []).append(minor)
                for leaf in leaves(rtype):
                    used_leaves.setdefault(leaf, set()).add(minor)
            if s.resource:
                resource_in.append(minor)
            meta = s.names.get("metadata")
            if meta and s.fields.get(meta) == OBJECT_META:
                meta_number = next(f["number"] for f in messages[index][4] if f["json"] == "metadata")
        if not present:
            continue
        path = struct(present[-1], index).path
        generated_paths.setdefault(path, set()).update(present)
        lines = []
        for key in sorted(table):
            for (ident, optional), in_versions in sorted(table[key].items()):
                gate = cfg(in_versions, present)
                call = "opt" if optional else "req"
                pattern = "(%d, %d)" % key
                lines.append("%s%s => %s(&mut self.%s, v)," % (gate, pattern, call, ident))
        inline = any(k[0] != index for k in table)
        generated.append((index, path, present, lines, inline, resource_in, meta_number))

    out = []
    w = out.append
    w("// @generated by schema/generate.py (schema/decoders.py) from the k8s-pb and k8s-openapi\n")
    w("// crates; do not edit. A decoder a k8s-openapi struct: its message's field numbers (and\n")
    w("// those of the Go structs embedded in it) matched to the struct's fields.\n\n")
    w("use super::kinds::{message, opt, req, serde_fallback};\n")
    w("use super::{FieldValue, Merge, Typed, typed};\n")
    w("use crate::Error;\n\n")
    for index, path, present, lines, inline, resource_in, meta_number in generated:
        gate = cfg(present, minors)
        body = []
        if lines:
            if inline:
                match = "match (msg, number) {\n"
                body_lines = lines
            else:
                match = "match number {\n"
                body_lines = [re.sub(r"^((?:#\[cfg[^\n]*\n)?)\(\d+, (\d+)\)", r"\1\2", l) for l in lines]
            body.append(match)
            for l in body_lines:
                body.append(indent(l, 4) + "\n")
            body.append("    _ => Ok(()),\n}\n")
        else:
            body.append("let _ = (number, v);\nOk(())\n")
        w(gate)
        w("impl Merge for %s {\n" % path)
        w("    const MESSAGE: u16 = %d;\n" % index)
        if meta_number is not None:
            w("    const METADATA: Option<u32> = Some(%d);\n" % meta_number)
        w("\n    #[inline]\n")
        msg = "msg" if lines and inline else "_msg"
        w("    fn merge_field(&mut self, %s: u16, number: u32, v: FieldValue<'_>) -> Result<(), Error> {\n" % msg)
        w(indent("".join(body), 8))
        w("    }\n")
        if meta_number is not None:
            w("\n    fn object_meta_mut(&mut self) -> Option<&mut %s> {\n" % OBJECT_META)
            w("        Some(&mut self.metadata)\n    }\n")
        if resource_in:
            w("\n    fn resource_type() -> Option<(&'static str, &'static str)> {\n")
            w("        Some((\n")
            w("            <Self as k8s_openapi::Resource>::API_VERSION,\n")
            w("            <Self as k8s_openapi::Resource>::KIND,\n")
            w("        ))\n    }\n")
        w("}\n\n")
        w(gate)
        w("message!(%s);\n\n" % path)

    # Every type a generated field holds that has no decoder of its own keeps serde's.
    for leaf, in_versions in sorted(used_leaves.items()):
        if leaf in HAND_WRITTEN:
            continue
        rest = set(in_versions) - generated_paths.get(leaf, set())
        if not rest:
            continue
        if not leaf.startswith("k8s_openapi::"):
            raise SystemExit("no decoder for %s" % leaf)
        w(cfg(sorted(rest), minors))
        w("serde_fallback!(%s);\n" % leaf)
    w("\n")
    w("/// The generated decoder of `K`, if it is one of the resource types above.\n")
    w("pub(super) fn find<K: 'static>() -> Option<Typed> {\n")
    for index, path, present, lines, inline, resource_in, meta_number in generated:
        if not resource_in:
            continue
        w(indent(cfg(resource_in, minors), 4))
        w("    if let Some(found) = typed::<K, %s>() {\n        return Some(found);\n    }\n" % path)
    w("    None\n}\n")
    with open(out_path, "w") as f:
        f.write("".join(out))
