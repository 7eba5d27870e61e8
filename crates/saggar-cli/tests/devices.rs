//! `saggar devices`: runs anywhere and always lists the host backend.

mod common;

use common::{Sandbox, assert_success, stdout};

#[test]
fn devices_lists_the_host_backend() {
    let sandbox = Sandbox::new();
    let output = sandbox.run(&["devices"]);
    assert_success(&output);
    let table = stdout(&output);
    assert!(table.lines().any(|l| l.starts_with("host") && l.contains("host-v1")), "{table}");
    for backend in ["cuda", "hip"] {
        assert!(table.lines().any(|l| l.starts_with(backend)), "`{backend}` is neither listed nor explained:\n{table}");
    }

    let output = sandbox.run(&["devices", "--json", "-"]);
    assert_success(&output);
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("JSON on stdout");
    let backends = json["backends"].as_array().expect("a backend list");
    let names: Vec<&str> = backends.iter().map(|b| b["backend"].as_str().unwrap()).collect();
    assert_eq!(names, ["cuda", "hip", "host"]);
    for backend in backends {
        let available = backend["available"].as_bool().unwrap();
        let devices = backend["devices"].as_array().unwrap();
        assert_eq!(available, !devices.is_empty(), "{backend:#}");
        assert_eq!(available, backend["reason"].is_null(), "an unavailable backend says why: {backend:#}");
    }
    let host = &backends[2];
    assert_eq!(host["available"], true);
    assert_eq!(host["devices"][0]["arch"], "host-v1");
}
