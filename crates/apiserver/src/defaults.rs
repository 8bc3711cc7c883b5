//! What kube-apiserver's defaulting and the pod strategy's `PrepareForCreate` do to a new pod:
//! `terminationGracePeriodSeconds` (30), container requests defaulted from limits, and a
//! `status` reset to `phase: Pending` with the `qosClass` of its resources.

use serde_json::{Map, Value, json};

/// Applies the create-time defaulting of a pod (`SetDefaults_Pod`, `SetDefaults_PodSpec`)
/// and the strategy's status reset. A status sent by the client is discarded.
pub(crate) fn prepare_pod_for_create(pod: &mut Value) {
    let Some(obj) = pod.as_object_mut() else {
        return;
    };
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        spec.entry("terminationGracePeriodSeconds")
            .or_insert_with(|| Value::from(30));
        for list in ["initContainers", "containers"] {
            if let Some(containers) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for container in containers {
                    default_requests_from_limits(container);
                }
            }
        }
    }
    let qos = qos_class(obj.get("spec").unwrap_or(&Value::Null));
    obj.insert(
        "status".into(),
        json!({"phase": "Pending", "qosClass": qos}),
    );
}

/// `SetDefaults_Pod`: a limit without a request makes the request equal to the limit.
fn default_requests_from_limits(container: &mut Value) {
    let Some(resources) = container
        .get_mut("resources")
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    let Some(limits) = resources.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    let requests = resources
        .entry("requests")
        .or_insert_with(|| Value::Object(Map::new()));
    if !requests.is_object() {
        *requests = Value::Object(Map::new());
    }
    let requests = requests.as_object_mut().expect("just made an object");
    for (name, quantity) in limits {
        requests.entry(name).or_insert(quantity);
    }
}

/// `ComputePodQOS`: over every container (init containers included), only CPU and memory
/// count; no non-zero request or limit is BestEffort; requests equal to limits for both CPU
/// and memory in every container is Guaranteed; anything else is Burstable. Pod-level
/// `spec.resources` (PodLevelResources, on since v1.34), when present, is used instead of
/// the containers'.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    const COMPUTE: [&str; 2] = ["cpu", "memory"];
    let pod_level = spec.get("resources").filter(|r| r.is_object());
    let resource_sets: Vec<&Value> = match pod_level {
        Some(r) => vec![r],
        None => ["initContainers", "containers"]
            .iter()
            .filter_map(|l| spec.get(*l).and_then(Value::as_array))
            .flatten()
            .map(|c| c.get("resources").unwrap_or(&Value::Null))
            .collect(),
    };
    let mut requests = [0i128; 2];
    let mut limits = [0i128; 2];
    let mut any_request = [false; 2];
    let mut any_limit = [false; 2];
    let mut guaranteed = true;
    for resources in resource_sets {
        for (i, name) in COMPUTE.iter().enumerate() {
            if let Some(q) = resources
                .pointer(&format!("/requests/{name}"))
                .and_then(Value::as_str)
                .and_then(parse_quantity)
                .filter(|q| *q != 0)
            {
                requests[i] += q;
                any_request[i] = true;
            }
        }
        let mut limits_found = 0;
        for (i, name) in COMPUTE.iter().enumerate() {
            if let Some(q) = resources
                .pointer(&format!("/limits/{name}"))
                .and_then(Value::as_str)
                .and_then(parse_quantity)
                .filter(|q| *q != 0)
            {
                limits[i] += q;
                any_limit[i] = true;
                limits_found += 1;
            }
        }
        if limits_found != COMPUTE.len() {
            guaranteed = false;
        }
    }
    if !any_request.iter().any(|r| *r) && !any_limit.iter().any(|l| *l) {
        return "BestEffort";
    }
    if guaranteed {
        for i in 0..COMPUTE.len() {
            if any_request[i] && (!any_limit[i] || limits[i] != requests[i]) {
                guaranteed = false;
            }
        }
    }
    let same_count =
        any_request.iter().filter(|r| **r).count() == any_limit.iter().filter(|l| **l).count();
    if guaranteed && same_count {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// A `resource.Quantity` in nano-units (`"100m"` is 100_000_000, `"1Ki"` 1024 * 10^9), or
/// `None` when it does not parse. Precision below 10^-9 is dropped.
pub(crate) fn parse_quantity(text: &str) -> Option<i128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (negative, digits) = match number.as_bytes().first() {
        Some(b'-') => (true, &number[1..]),
        Some(b'+') => (false, &number[1..]),
        _ => (false, number),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if (whole.is_empty() && fraction.is_empty())
        || !whole.bytes().all(|b| b.is_ascii_digit())
        || !fraction.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    // Mantissa and a power of ten: value = mantissa * 10^exp10 * 2^exp2.
    let mut mantissa: i128 = 0;
    for b in whole.bytes().chain(fraction.bytes()) {
        mantissa = mantissa
            .checked_mul(10)?
            .checked_add(i128::from(b - b'0'))?;
    }
    let mut exp10: i32 = -i32::try_from(fraction.len()).ok()?;
    let mut exp2: u32 = 0;
    match suffix {
        "" => {}
        "n" => exp10 -= 9,
        "u" => exp10 -= 6,
        "m" => exp10 -= 3,
        "k" => exp10 += 3,
        "M" => exp10 += 6,
        "G" => exp10 += 9,
        "T" => exp10 += 12,
        "P" => exp10 += 15,
        "E" => exp10 += 18,
        "Ki" => exp2 = 10,
        "Mi" => exp2 = 20,
        "Gi" => exp2 = 30,
        "Ti" => exp2 = 40,
        "Pi" => exp2 = 50,
        "Ei" => exp2 = 60,
        s if s.starts_with(['e', 'E']) => exp10 += s[1..].parse::<i32>().ok()?,
        _ => return None,
    }
    // To nano-units.
    exp10 += 9;
    let mut value = mantissa.checked_mul(1i128.checked_shl(exp2)?)?;
    if exp10 >= 0 {
        value = value.checked_mul(10i128.checked_pow(u32::try_from(exp10).ok()?)?)?;
    } else {
        let divisor = 10i128.checked_pow(u32::try_from(-exp10).ok()?)?;
        value /= divisor;
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_compare_by_value() {
        assert_eq!(parse_quantity("1Gi"), parse_quantity("1024Mi"));
        assert_eq!(parse_quantity("100m"), parse_quantity("0.1"));
        assert_eq!(parse_quantity("1k"), parse_quantity("1e3"));
        assert_eq!(parse_quantity("2"), Some(2_000_000_000));
        assert_eq!(parse_quantity("0"), Some(0));
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity("1Xi"), None);
    }
}
