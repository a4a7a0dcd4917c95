//! What the clouds answered, as plain data: the model below the planner, the platform rules and
//! the cloud clients alike. The clients (`src/ec2`, `src/vcenter`) fill it, the controller puts
//! it in the snapshot, the rules read it; none of them needs another to name it.

pub mod ec2;
pub mod region;
pub mod vcenter;

/// What a decision rests on that only a cloud can answer: the platform rule names it beside its
/// outcome, and after the pass the controller hands it to its look-ups, which ask what they do
/// not know yet (or any more). The planner runs once per pass; nothing plans to learn what to ask.
#[derive(Clone, Debug, PartialEq)]
pub enum Lookup {
    /// Who owns the AMI `image_id` of `region` (a name of AWS's form: `region::is_region`).
    Ami { region: String, image_id: String },
    /// The release of the template a vSphere MachineSet clones, and the golden template it moves
    /// to: read, found or imported.
    Template(Box<vcenter::TemplateRequest>),
}
