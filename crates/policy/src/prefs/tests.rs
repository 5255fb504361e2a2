use super::*;

#[test]
fn placeholder_compiles() {
    assert_eq!(Stance::Unknown.combine(Stance::Allowed), Stance::Allowed);
}
