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
    each field a dict with `number`, `json`, `inline`, `msg` (the index of its message type, or
    None) and `run` (repeated or a map)."""
    minors_dirs = versions(openapi_root)
    minors = [m for m, _ in minors_dirs]
    by_version = {m: structs_of(d) for m, d in minors_dirs}

    def struct(minor, index):
        _, rel, mname, special, _ = messages[index]
        if special != "None":
            return None
        return by_version[minor].get((rel, norm(mname)))

    def arms_of(index, target, used):
        """The arms reading message `index` into `target` (a Struct): `number -> text` (an
        embedded struct's arm calls its own function, `(index, child)`, listed in `inlines`)."""
        out = {}
        for i, f in enumerate(messages[index][4]):
            if f["inline"] and f["msg"] is not None:
                out[f["number"]] = ("inline", i, f["msg"])
                continue
            ident = target.names.get(f["json"])
            if ident is None or ident not in target.fields:
                continue
            rtype = target.fields[ident]
            for leaf in leaves(rtype):
                used.add(leaf)
            optional = rtype.startswith("Option<")
            if f["json"] == "metadata" and rtype == OBJECT_META:
                call = "metadata(&mut this.%s, %d, %d, level)" % (ident, index, i)
            elif f["json"] == "managedFields" and messages[index][0].endswith("meta.v1.ObjectMeta"):
                call = "managed_fields(&mut this.%s, %d, %d, &mut r, level)" % (ident, index, i)
            elif f["run"]:
                call = "%s_run(&mut this.%s, %d, %d, &mut r, level)" % (
                    "opt" if optional else "req", ident, index, i)
            else:
                call = "%s(&mut this.%s, %d, %d)" % ("opt" if optional else "req", ident, index, i)
            out[f["number"]] = ("field", "at." + call)
        return out

    # Per message: the versions it is generated in, and per version its arms (and those of the
    # embedded structs it holds, keyed by (parent, child)).
    generated = []
    used_leaves = {}
    generated_paths = {}
    for index in range(len(messages)):
        present, per_version, resource_in = [], {}, []
        for minor in minors:
            s = struct(minor, index)
            if s is None or s.strict:
                continue
            present.append(minor)
            used = set()
            bodies = {}
            todo = [index]
            while todo:
                m = todo.pop()
                if m in bodies:
                    continue
                bodies[m] = arms_of(m, s, used)
                todo.extend(a[2] for a in bodies[m].values() if a[0] == "inline")
            per_version[minor] = bodies
            for leaf in used:
                used_leaves.setdefault(leaf, set()).add(minor)
            if s.resource:
                resource_in.append(minor)
        if not present:
            continue
        path = struct(present[-1], index).path
        generated_paths.setdefault(path, set()).update(present)
        generated.append((index, path, present, per_version, resource_in))

    def body(index, m, present, per_version):
        """The loop reading message `m` into `this` (of message `index`), as Rust text, its arms
        gated by version where they differ."""
        arms = {}
        for minor in present:
            for number, arm in per_version[minor][m].items():
                if arm[0] == "inline":
                    text = "%s(this, at.inline(%d, %d)?, level)" % (fn_name(index, arm[2]), m, arm[1])
                else:
                    text = arm[1]
                arms.setdefault(number, {}).setdefault(text, []).append(minor)
        out = ["let mut r = Reader::new(buf);\n", "while !r.is_empty() {\n",
               "    let at = At::read(&mut r)?;\n", "    match at.number {\n"]
        for number in sorted(arms):
            for text, in_versions in sorted(arms[number].items()):
                out.append(indent(cfg(in_versions, present), 8))
                out.append("        %d => %s?,\n" % (number, text))
        out.append("        _ => at.other(%d, &mut r, level)?,\n" % m)
        out.append("    }\n}\nOk(())\n")
        return "".join(out)

    def fn_name(index, m):
        return "embedded_%d_in_%d" % (m, index)

    out = []
    w = out.append
    w("// @generated by schema/generate.py (schema/decoders.py) from the k8s-pb and k8s-openapi\n")
    w("// crates; do not edit. A decoder per k8s-openapi struct: its message's field numbers (and\n")
    w("// those of the Go structs embedded in it) matched to the struct's fields.\n\n")
    w("use super::field::At;\n")
    w("use super::kinds::{message, serde_fallback};\n")
    w("use super::{Level, Merge, Typed, typed};\n")
    w("use crate::Error;\n")
    w("use crate::wire::Reader;\n\n")
    for index, path, present, per_version, resource_in in generated:
        gate = cfg(present, minors)
        w(gate)
        w("impl Merge for %s {\n" % path)
        w("    const MESSAGE: u16 = %d;\n\n" % index)
        w("    #[inline]\n")
        w("    fn merge(&mut self, buf: &[u8], level: &mut Level) -> Result<(), Error> {\n")
        w("        let this = self;\n")
        w(indent(body(index, index, present, per_version), 8))
        w("    }\n")
        if "metadata(" in body(index, index, present, per_version):
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
        inlined = sorted({m for minor in present for m in per_version[minor] if m != index})
        for m in inlined:
            in_versions = [minor for minor in present if m in per_version[minor]]
            w(cfg(in_versions, minors))
            w("fn %s(this: &mut %s, buf: &[u8], level: &mut Level) -> Result<(), Error> {\n"
              % (fn_name(index, m), path))
            w(indent(body(index, m, in_versions, per_version), 4))
            w("}\n\n")

    # Every type a generated field holds that has no decoder of its own keeps serde's.
    for leaf, in_versions in sorted(used_leaves.items()):
        if leaf in HAND_WRITTEN or leaf in SERDE_ONLY:
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
    for index, path, present, per_version, resource_in in generated:
        if not resource_in:
            continue
        w(indent(cfg(resource_in, minors), 4))
        w("    if let Some(found) = typed::<K, %s>() {\n        return Some(found);\n    }\n" % path)
    w("    None\n}\n")
    with open(out_path, "w") as f:
        f.write("".join(out))
