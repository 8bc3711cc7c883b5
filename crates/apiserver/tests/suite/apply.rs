//! Server-side apply and `metadata.managedFields` over raw HTTP: what kube-apiserver answers to
//! an apply (create, merge, removal of what is no longer applied, conflicts, force, shared
//! ownership, no-op), the `Update` entries of every other write, and the errors of bad applies.

use crate::http;

use http::{APPLY, JSON, MERGE, apply, entries, get, send, start, write};
use informer_apiserver::ResourceInfo;
use serde_json::{Value, json};

const SETTINGS: &str = "/api/v1/namespaces/demo/configmaps/settings";

fn config_map(data: Value) -> String {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "demo"},
        "data": data,
    })
    .to_string()
}

fn managers(object: &Value) -> Vec<(String, String)> {
    entries(object)
        .into_iter()
        .map(|(manager, operation, _, _)| (manager, operation))
        .collect()
}

/// The fields of `manager`'s entry.
fn fields_of(object: &Value, manager: &str) -> Value {
    entries(object)
        .into_iter()
        .find(|e| e.0 == manager)
        .map(|e| e.3)
        .unwrap_or_else(|| panic!("no entry of {manager} in {object}"))
}

#[tokio::test]
async fn an_apply_to_a_missing_object_creates_it_with_an_apply_entry() {
    let server = start().await;
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "demo", "labels": {"app": "web"}},
        "data": {"a": "1"},
    });
    let created = apply(&server, SETTINGS, "deployer", false, &body.to_string())
        .await
        .object(201);
    assert!(created["metadata"]["uid"].is_string());
    assert!(created["metadata"]["creationTimestamp"].is_string());
    assert_eq!(
        created["metadata"]["resourceVersion"],
        server.resource_version().to_string()
    );
    assert_eq!(created["data"], json!({"a": "1"}));
    let entry = &created["metadata"]["managedFields"][0];
    assert_eq!(entry["manager"], "deployer");
    assert_eq!(entry["operation"], "Apply");
    assert_eq!(entry["apiVersion"], "v1");
    assert_eq!(entry["fieldsType"], "FieldsV1");
    assert!(entry["time"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(
        entry["fieldsV1"],
        json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
    );
    assert_eq!(
        created["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // Read back as stored.
    assert_eq!(get(&server, SETTINGS).await.object(200), created);

    // A YAML body, and a pod: created as a create would be (defaults, generation, status).
    let pod = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web-0\n  namespace: demo\n\
               spec:\n  containers:\n  - name: app\n    image: nginx:1\n";
    let pod = apply(
        &server,
        "/api/v1/namespaces/demo/pods/web-0",
        "deployer",
        false,
        pod,
    )
    .await
    .object(201);
    assert_eq!(pod["metadata"]["generation"], 1);
    assert_eq!(pod["spec"]["terminationGracePeriodSeconds"], 30);
    assert_eq!(pod["status"]["phase"], "Pending");
    assert_eq!(
        entries(&pod)[0].3,
        json!({"f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {
            ".": {}, "f:image": {}, "f:name": {}}}}})
    );
}

#[tokio::test]
async fn applies_merge_and_remove_what_their_manager_no_longer_applies() {
    let server = start().await;
    let created = write(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps?fieldManager=creator",
        JSON,
        &config_map(json!({"keep": "1"})),
    )
    .await
    .object(201);
    assert_eq!(
        entries(&created),
        [(
            "creator".to_owned(),
            "Update".to_owned(),
            String::new(),
            json!({"f:data": {".": {}, "f:keep": {}}})
        )]
    );
    let merged = apply(
        &server,
        SETTINGS,
        "deployer",
        false,
        &config_map(json!({"a": "1", "b": "2"})),
    )
    .await
    .object(200);
    assert_eq!(merged["data"], json!({"keep": "1", "a": "1", "b": "2"}));
    // Apply entries come first.
    assert_eq!(
        managers(&merged),
        [
            ("deployer".to_owned(), "Apply".to_owned()),
            ("creator".to_owned(), "Update".to_owned())
        ]
    );
    assert_eq!(
        entries(&merged)[0].3,
        json!({"f:data": {"f:a": {}, "f:b": {}}})
    );

    // `b` is no longer applied: removed. `keep` is the creator's: kept.
    let pruned = apply(
        &server,
        SETTINGS,
        "deployer",
        false,
        &config_map(json!({"a": "1"})),
    )
    .await
    .object(200);
    assert_eq!(pruned["data"], json!({"keep": "1", "a": "1"}));
    assert_eq!(entries(&pruned)[0].3, json!({"f:data": {"f:a": {}}}));

    // Nothing applied but the name: the manager's fields go, and so does its entry.
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "demo"}});
    let bare = apply(&server, SETTINGS, "deployer", false, &bare.to_string())
        .await
        .object(200);
    assert_eq!(bare["data"], json!({"keep": "1"}));
    assert_eq!(
        managers(&bare),
        [("creator".to_owned(), "Update".to_owned())]
    );
}

#[tokio::test]
async fn lists_merge_by_their_key_and_elements_are_owned_one_by_one() {
    let server = start().await;
    let pod = |containers: Value| {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "namespace": "demo"},
            "spec": {"containers": containers}})
        .to_string()
    };
    let path = "/api/v1/namespaces/demo/pods/web-0";
    apply(
        &server,
        path,
        "app",
        false,
        &pod(json!([{"name": "app", "image": "a:1"}])),
    )
    .await
    .object(201);
    let both = apply(
        &server,
        path,
        "sidecar",
        false,
        &pod(json!([{"name": "proxy", "image": "p:1"}])),
    )
    .await
    .object(200);
    let names: Vec<&str> = both["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app", "proxy"]);
    // Each manager's element is its own; the spec is not a conflict.
    let apps = apply(
        &server,
        path,
        "app",
        false,
        &pod(json!([{"name": "app", "image": "a:2"}])),
    )
    .await
    .object(200);
    assert_eq!(apps["spec"]["containers"][0]["image"], "a:2");
    assert_eq!(apps["spec"]["containers"][1]["image"], "p:1");
    // The sidecar's manager drops its element: it goes, the other stays.
    let alone = apply(&server, path, "sidecar", false, &pod(json!([])))
        .await
        .object(200);
    assert_eq!(
        alone["spec"]["containers"],
        json!([{"name": "app", "image": "a:2"}])
    );
}

#[tokio::test]
async fn a_conflicting_apply_is_a_409_with_its_causes_and_force_takes_the_fields() {
    let server = start().await;
    write(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps?fieldManager=other",
        JSON,
        &config_map(json!({"key": "1", "other": "x"})),
    )
    .await
    .object(201);
    let before = server.resource_version();
    let x = apply(
        &server,
        SETTINGS,
        "mgr",
        false,
        &config_map(json!({"key": "2"})),
    )
    .await;
    assert_eq!(x.status, 409);
    assert_eq!(
        x.text,
        "{\"apiVersion\":\"v1\",\"code\":409,\"details\":{\"causes\":[{\"field\":\".data.key\",\
         \"message\":\"conflict with \\\"other\\\" using v1\",\"reason\":\"FieldManagerConflict\"}]},\
         \"kind\":\"Status\",\"message\":\"Apply failed with 1 conflict: conflict with \\\"other\\\" \
         using v1: .data.key\",\"metadata\":{},\"reason\":\"Conflict\",\"status\":\"Failure\"}"
    );
    assert_eq!(
        server.resource_version(),
        before,
        "a refused apply writes nothing"
    );

    let both = config_map(json!({"key": "2", "other": "y"}));
    let status = apply(&server, SETTINGS, "mgr", false, &both)
        .await
        .status_of(409, "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 2 conflicts: conflicts with \"other\" using v1:\n- .data.key\n- .data.other"
    );
    assert_eq!(status["details"]["causes"].as_array().unwrap().len(), 2);

    // Forced: the fields change hands; the other manager keeps only the map it created.
    let forced = apply(&server, SETTINGS, "mgr", true, &both)
        .await
        .object(200);
    assert_eq!(forced["data"], json!({"key": "2", "other": "y"}));
    assert_eq!(
        entries(&forced),
        [
            (
                "mgr".to_owned(),
                "Apply".to_owned(),
                String::new(),
                json!({"f:data": {"f:key": {}, "f:other": {}}})
            ),
            (
                "other".to_owned(),
                "Update".to_owned(),
                String::new(),
                json!({"f:data": {}})
            ),
        ]
    );

    // A conflict with another applier names it without a version.
    let status = apply(
        &server,
        SETTINGS,
        "third",
        false,
        &config_map(json!({"key": "3"})),
    )
    .await
    .status_of(409, "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"mgr\": .data.key"
    );
    assert_eq!(
        status["details"]["causes"][0],
        json!({"reason": "FieldManagerConflict", "message": "conflict with \"mgr\"", "field": ".data.key"})
    );
}

#[tokio::test]
async fn the_same_value_applied_by_two_managers_is_owned_by_both() {
    let server = start().await;
    apply(
        &server,
        SETTINGS,
        "a",
        false,
        &config_map(json!({"k": "v"})),
    )
    .await
    .object(201);
    let shared = apply(
        &server,
        SETTINGS,
        "b",
        false,
        &config_map(json!({"k": "v"})),
    )
    .await
    .object(200);
    let owners: Vec<Value> = entries(&shared).into_iter().map(|e| e.3).collect();
    assert_eq!(
        owners,
        [
            json!({"f:data": {"f:k": {}}}),
            json!({"f:data": {"f:k": {}}})
        ]
    );
    // One owner lets go: the field stays, the other still owns it.
    let bare = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "demo"}})
    .to_string();
    let kept = apply(&server, SETTINGS, "a", false, &bare)
        .await
        .object(200);
    assert_eq!(kept["data"], json!({"k": "v"}));
    assert_eq!(managers(&kept), [("b".to_owned(), "Apply".to_owned())]);
    // The last owner lets go: removed.
    let gone = apply(&server, SETTINGS, "b", false, &bare)
        .await
        .object(200);
    assert_eq!(gone.get("data"), None);
    assert_eq!(gone["metadata"].get("managedFields"), None);
}

#[tokio::test]
async fn an_apply_that_changes_nothing_takes_no_revision() {
    let server = start().await;
    let body = config_map(json!({"a": "1"}));
    let first = apply(&server, SETTINGS, "mgr", false, &body)
        .await
        .object(201);
    let head = server.resource_version();
    let again = apply(&server, SETTINGS, "mgr", false, &body)
        .await
        .object(200);
    assert_eq!(again, first, "the stored object, unchanged, time included");
    assert_eq!(server.resource_version(), head);
}

#[tokio::test]
async fn every_other_write_records_an_update_entry_for_its_manager() {
    let server = start().await;
    write(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps?fieldManager=creator",
        JSON,
        &config_map(json!({"a": "1", "b": "1"})),
    )
    .await
    .object(201);
    // No fieldManager: the first token of the User-Agent names the manager.
    let put = send(
        &server,
        "PUT",
        SETTINGS,
        &[
            ("Content-Type", JSON),
            ("User-Agent", "my-tool/1.2 (linux/amd64)"),
        ],
        config_map(json!({"a": "2", "b": "1"})).as_bytes(),
    )
    .await
    .object(200);
    // (Entries sort by time before manager: the names find them whatever the clock said.)
    assert_eq!(
        fields_of(&put, "creator"),
        json!({"f:data": {".": {}, "f:b": {}}})
    );
    assert_eq!(fields_of(&put, "my-tool"), json!({"f:data": {"f:a": {}}}));
    assert_eq!(entries(&put).len(), 2);
    // Neither: an entry without a manager. A merge patch takes the field it changes.
    let patched = write(&server, "PATCH", SETTINGS, MERGE, r#"{"data":{"b":"2"}}"#)
        .await
        .object(200);
    let unnamed = patched["metadata"]["managedFields"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e.get("manager").is_none())
        .expect("an entry without a manager");
    assert_eq!(unnamed["operation"], "Update");
    assert_eq!(unnamed["fieldsV1"], json!({"f:data": {"f:b": {}}}));
    // What the creator still owns is the map it made: a member without children is `{}`.
    assert_eq!(fields_of(&patched, "creator"), json!({"f:data": {}}));

    // A strategic merge patch and a JSON patch record theirs too.
    let smp = write(
        &server,
        "PATCH",
        &format!("{SETTINGS}?fieldManager=labeller"),
        "application/strategic-merge-patch+json",
        r#"{"metadata":{"labels":{"x":"1"}}}"#,
    )
    .await
    .object(200);
    assert_eq!(
        fields_of(&smp, "labeller"),
        json!({"f:metadata": {"f:labels": {".": {}, "f:x": {}}}})
    );
    // Listed and read with them.
    let list = get(&server, "/api/v1/namespaces/demo/configmaps")
        .await
        .object(200);
    assert_eq!(
        list["items"][0]["metadata"]["managedFields"],
        smp["metadata"]["managedFields"]
    );
}

#[tokio::test]
async fn managed_fields_in_a_body_replace_or_reset_the_stored_ones() {
    let server = start().await;
    write(
        &server,
        "POST",
        "/api/v1/namespaces/demo/configmaps?fieldManager=creator",
        JSON,
        &config_map(json!({"a": "1"})),
    )
    .await
    .object(201);
    let mut body: Value = serde_json::from_str(&config_map(json!({"a": "1"}))).unwrap();
    // Entries that do not read: the stored ones stay.
    body["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Bogus"}]);
    let kept = write(&server, "PUT", SETTINGS, JSON, &body.to_string())
        .await
        .object(200);
    assert_eq!(
        managers(&kept),
        [("creator".to_owned(), "Update".to_owned())]
    );
    // Entries that read replace them.
    let given = json!([{"manager": "someone", "operation": "Apply", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}]);
    body["metadata"]["managedFields"] = given.clone();
    let replaced = write(&server, "PUT", SETTINGS, JSON, &body.to_string())
        .await
        .object(200);
    assert_eq!(replaced["metadata"]["managedFields"], given);
    // `[]` resets them: only this write's own entry, if it changed anything.
    body["metadata"]["managedFields"] = json!([]);
    body["data"]["a"] = json!("2");
    let reset = write(
        &server,
        "PUT",
        &format!("{SETTINGS}?fieldManager=resetter"),
        JSON,
        &body.to_string(),
    )
    .await
    .object(200);
    assert_eq!(
        entries(&reset),
        [(
            "resetter".to_owned(),
            "Update".to_owned(),
            String::new(),
            json!({"f:data": {"f:a": {}}})
        )]
    );
}

#[tokio::test]
async fn bad_applies_get_kube_apiservers_answers() {
    let server = start().await;
    apply(
        &server,
        SETTINGS,
        "mgr",
        false,
        &config_map(json!({"a": "1"})),
    )
    .await
    .object(201);
    // No fieldManager.
    let x = write(&server, "PATCH", SETTINGS, APPLY, &config_map(json!({}))).await;
    assert_eq!(
        x.text,
        "{\"apiVersion\":\"v1\",\"code\":422,\"details\":{\"causes\":[{\"field\":\"fieldManager\",\
         \"message\":\"Required value: is required for apply patch\",\"reason\":\"FieldValueRequired\"}],\
         \"group\":\"meta.k8s.io\",\"kind\":\"PatchOptions\"},\"kind\":\"Status\",\"message\":\
         \"PatchOptions.meta.k8s.io \\\"\\\" is invalid: fieldManager: Required value: is required for \
         apply patch\",\"metadata\":{},\"reason\":\"Invalid\",\"status\":\"Failure\"}"
    );
    // `force` on another patch type.
    let status = write(
        &server,
        "PATCH",
        &format!("{SETTINGS}?force=true"),
        MERGE,
        "{}",
    )
    .await
    .status_of(422, "Invalid");
    assert_eq!(
        status["message"],
        "PatchOptions.meta.k8s.io \"\" is invalid: force: Forbidden: may not be specified for non-apply patch"
    );
    // A body that is not YAML, or not an object.
    let status = apply(&server, SETTINGS, "mgr", false, "data: [")
        .await
        .status_of(400, "BadRequest");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .starts_with("error decoding YAML: "),
        "{status}"
    );
    let status = apply(&server, SETTINGS, "mgr", false, "- a")
        .await
        .status_of(400, "BadRequest");
    assert_eq!(
        status["message"],
        "error decoding YAML: error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"
    );
    // Another kind, no kind, managed fields in the configuration.
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "settings"}});
    let status = apply(&server, SETTINGS, "mgr", false, &secret.to_string())
        .await
        .status_of(400, "BadRequest");
    assert_eq!(status["message"], "invalid object type: /v1, Kind=Secret");
    let status = apply(&server, SETTINGS, "mgr", false, "{}")
        .await
        .status_of(400, "BadRequest");
    assert_eq!(status["message"], "invalid object type: /, Kind=");
    let mut with_fields: Value = serde_json::from_str(&config_map(json!({}))).unwrap();
    with_fields["metadata"]["managedFields"] = json!([]);
    let status = apply(&server, SETTINGS, "mgr", false, &with_fields.to_string())
        .await
        .status_of(400, "BadRequest");
    assert_eq!(status["message"], "metadata.managedFields must be nil");
    // Another name than the URL's.
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}});
    let status = apply(
        &server,
        "/api/v1/namespaces/demo/configmaps/new",
        "mgr",
        false,
        &other.to_string(),
    )
    .await
    .status_of(400, "BadRequest");
    assert_eq!(
        status["message"],
        "the name of the object (other) does not match the name on the URL (new)"
    );
    // A list element without its key: structured-merge-diff's error, a 500 without a reason.
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "demo"},
        "spec": {"containers": [{"image": "x"}]}});
    let x = apply(
        &server,
        "/api/v1/namespaces/demo/pods/p",
        "mgr",
        false,
        &pod.to_string(),
    )
    .await;
    assert_eq!(x.status, 500, "{}", x.text);
    let status = x.json();
    assert_eq!(status.get("reason"), None);
    assert_eq!(
        status["message"],
        "failed to create typed patch object (demo/p; /v1, Kind=Pod): .spec.containers: element 0: \
         associative list with keys has an element that omits key field \"name\" (and doesn't have default value)"
    );
}

#[tokio::test]
async fn custom_resources_apply_with_every_list_atomic() {
    let widgets = ResourceInfo::custom("example.com", "v1", "Widget", "widgets", true);
    let server = http::start_with(
        informer_apiserver::Config::for_tests(std::time::Duration::from_millis(100))
            .register_info(widgets),
    )
    .await;
    let path = "/apis/example.com/v1/namespaces/demo/widgets/w";
    let widget = |ports: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "demo"}, "spec": {"ports": ports}})
        .to_string()
    };
    let created = apply(&server, path, "a", false, &widget(json!([{"port": 80}])))
        .await
        .object(201);
    assert_eq!(created["metadata"]["generation"], 1);
    assert_eq!(entries(&created)[0].3, json!({"f:spec": {"f:ports": {}}}));
    // The whole list is one field: another manager changing it conflicts, forced it replaces.
    let status = apply(&server, path, "b", false, &widget(json!([{"port": 81}])))
        .await
        .status_of(409, "Conflict");
    assert_eq!(
        status["message"],
        "Apply failed with 1 conflict: conflict with \"a\": .spec.ports"
    );
    let forced = apply(&server, path, "b", true, &widget(json!([{"port": 81}])))
        .await
        .object(200);
    assert_eq!(forced["spec"]["ports"], json!([{"port": 81}]));
    assert_eq!(forced["metadata"]["generation"], 2);
}
