//! The platform rules on arbitrary providerSpecs (and streams): no panic, and every Update
//! names changes whose `from` is what the providerSpec holds at that pointer, so the planner's
//! `test` ops describe the object it planned from.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use boot_image_controller::arch::Arch;
use boot_image_controller::golden_stream::GoldenStream;
use boot_image_controller::platform::{ImageOutcome, Platform};
use boot_image_controller::testkit::rules::{Cluster, Outcome};
use boot_image_controller_fuzz as g;
use libfuzzer_sys::fuzz_target;

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let stream_json = if u.ratio(1, 2)? {
        boot_image_controller::testkit::streams::stream_421_all_platforms()
    } else {
        g::stream(u)?
    };
    if GoldenStream::parse(&stream_json.to_string()).is_err() {
        return Ok(());
    }
    // The kit's cluster (the stream's own references known, as the planner builds them), so
    // that a field added to `RuleContext` reaches this target through the kit.
    let mut extra = Vec::new();
    for _ in 0..u.int_in_range(0..=2)? {
        extra.push(g::string(u)?);
    }
    let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
    let mut cluster = Cluster::new(stream_json).knowing(&extra).on_vsphere();
    match u.int_in_range(0..=2)? {
        0 => {}
        1 => cluster = cluster.named(g::INFRASTRUCTURE_NAME),
        _ => cluster = cluster.named(&u.arbitrary::<String>()?),
    }
    let shape = g::Shape::arbitrary(u)?;
    let spec = g::provider_spec(u, shape)?;
    let platforms = [
        Platform::Aws,
        Platform::Gcp,
        Platform::Azure,
        Platform::VSphere,
    ];
    for platform in &platforms {
        let rule = platform.rule().expect("these platforms have rules");
        for arch in Arch::ALL {
            let outcome = rule.outcome(&spec, &cluster.ctx(arch));
            let ImageOutcome::Update {
                current,
                target,
                changes,
            } = &outcome
            else {
                continue;
            };
            let mut count = 0;
            for (pointer, from, to) in changes.iter(&spec, current, target) {
                count += 1;
                assert_eq!(
                    spec.pointer(pointer),
                    Some(from),
                    "{platform:?}/{arch:?}: the change at {pointer} from {from} does not start \
                     from what {spec} holds ({outcome:?})"
                );
                assert_ne!(
                    from, to,
                    "{platform:?}/{arch:?}: a no-op change at {pointer}"
                );
            }
            assert!(count > 0, "an Update without changes: {spec}");
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
