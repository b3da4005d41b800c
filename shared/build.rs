// The migrations are compiled into the library (refinery's
// embed_migrations!), which cargo cannot see: rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
