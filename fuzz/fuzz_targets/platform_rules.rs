//! The platform rules on arbitrary providerSpecs (and streams): no panic, and every Update
//! names changes whose `from` is what the providerSpec holds at that pointer, so the planner's
//! `test` ops describe the object it planned from.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use boot_image_controller::arch::Arch;
use boot_image_controller::known_images::KnownImages;
use boot_image_controller::platform::{ImageOutcome, Platform, RuleContext};
use boot_image_controller::golden_stream::GoldenStream;
use boot_image_controller_fuzz as g;
use libfuzzer_sys::fuzz_target;

fn run(u: &mut Unstructured<'_>) -> arbitrary::Result<()> {
    let stream_json = if u.ratio(1, 2)? {
        boot_image_controller::testkit::streams::stream_421_all_platforms()
    } else {
        g::stream(u)?
    };
    let Ok(stream) = GoldenStream::parse(&stream_json.to_string()) else {
        return Ok(());
    };
    let mut known: KnownImages = stream.image_references().into_iter().collect();
    for _ in 0..u.int_in_range(0..=2)? {
        known.extend([g::string(u)?]);
    }
    let shape = g::Shape::arbitrary(u)?;
    let spec = g::provider_spec(u, shape)?;
    let infrastructure_name = match u.int_in_range(0..=2)? {
        0 => None,
        1 => Some(g::INFRASTRUCTURE_NAME.to_string()),
        _ => Some(u.arbitrary::<String>()?),
    };
    let platforms = [Platform::Aws, Platform::Gcp, Platform::Azure];
    for platform in &platforms {
        let rule = platform.rule().expect("these platforms have rules");
        for arch in Arch::ALL {
            let ctx = RuleContext {
                stream: &stream,
                arch,
                known_images: &known,
                infrastructure_name: infrastructure_name.as_deref(),
                ec2: &Default::default(),
                platform_spec: None,
                vcenter: &Default::default(),
            };
            if let ImageOutcome::Update { changes, .. } = rule.evaluate(&spec, &ctx) {
                assert!(!changes.is_empty(), "an Update without changes: {spec}");
                for change in changes {
                    assert_eq!(
                        spec.pointer(&change.pointer),
                        Some(&change.from),
                        "{platform:?}/{arch:?}: change {change:?} does not match {spec}"
                    );
                    assert_ne!(change.from, change.to, "a no-op change {change:?}");
                }
            }
        }
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let _ = run(&mut Unstructured::new(data));
});
