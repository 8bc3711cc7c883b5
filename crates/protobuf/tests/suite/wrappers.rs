//! Messages whose JSON form is their content, not an object of their fields: `ExtraValue` (a
//! list), apiextensions' `JSON` (raw JSON), `JSONSchemaPropsOrBool` (a schema or a bool) and
//! `JSONSchemaPropsOrArray` (a schema or a list), read from bytes built by hand as Go writes
//! them.

use informer_protobuf::MessageType;
use k8s_openapi::api::certificates::v1::CertificateSigningRequestSpec;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    JSONSchemaProps, JSONSchemaPropsOrBool,
};

/// A field's key: its number and wire type, as a varint.
fn key(number: u32, wire: u32) -> Vec<u8> {
    let mut k = (number << 3) | wire;
    let mut out = Vec::new();
    while k >= 0x80 {
        out.push((k as u8) | 0x80);
        k >>= 7;
    }
    out.push(k as u8);
    out
}

/// A length-delimited field.
fn field(number: u32, bytes: &[u8]) -> Vec<u8> {
    assert!(bytes.len() < 128);
    let mut out = key(number, 2);
    out.push(bytes.len() as u8);
    out.extend_from_slice(bytes);
    out
}

/// A varint field.
fn varint(number: u32, value: u8) -> Vec<u8> {
    let mut out = key(number, 0);
    out.push(value);
    out
}

#[test]
fn an_extra_value_reads_as_its_list() {
    // extra: {"groups": ["a", "b"]}: a map entry {1: key, 2: ExtraValue{1: "a", 1: "b"}}.
    let extra_value = [field(1, b"a"), field(1, b"b")].concat();
    let entry = [field(1, b"groups"), field(2, &extra_value)].concat();
    let spec = [field(1, b"csr"), field(6, &entry), field(7, b"x/y")].concat();
    let message = MessageType::for_kind("certificates.k8s.io/v1", "CertificateSigningRequestSpec")
        .expect("a message");
    let decoded: CertificateSigningRequestSpec = message.decode(&spec).expect("decodes");
    let extra = decoded.extra.expect("extra");
    assert_eq!(extra["groups"], vec!["a".to_owned(), "b".to_owned()]);
    assert_eq!(decoded.signer_name, "x/y");
}

#[test]
fn a_schema_reads_its_json_defaults_and_its_schema_or_bool() {
    let message = MessageType::for_kind("apiextensions.k8s.io/v1", "JSONSchemaProps")
        .expect("a message, whatever the case of its acronyms");
    // type: object, default: 5 (JSON{raw: "5"}), additionalProperties: false.
    let props = [
        field(5, b"object"),
        field(8, &field(1, b"5")),
        field(30, &varint(1, 0)),
    ]
    .concat();
    let decoded: JSONSchemaProps = message.decode(&props).expect("decodes");
    assert_eq!(decoded.type_.as_deref(), Some("object"));
    assert_eq!(decoded.default.expect("default").0, serde_json::json!(5));
    assert!(matches!(
        decoded.additional_properties,
        Some(JSONSchemaPropsOrBool::Bool(false))
    ));

    // additionalProperties: a schema of type string.
    let props = field(30, &field(2, &field(5, b"string")));
    let decoded: JSONSchemaProps = message.decode(&props).expect("decodes");
    match decoded.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(schema)) => {
            assert_eq!(schema.type_.as_deref(), Some("string"));
        }
        other => panic!("{other:?}"),
    }

    // items: a list of two schemas (JSONSchemaPropsOrArray{2: a, 2: b}).
    let items = [
        field(2, &field(5, b"string")),
        field(2, &field(5, b"integer")),
    ]
    .concat();
    let props = [field(5, b"array"), field(24, &items)].concat();
    let decoded: serde_json::Value = message.decode(&props).expect("decodes");
    assert_eq!(
        decoded["items"],
        serde_json::json!([{"type": "string"}, {"type": "integer"}])
    );
}
