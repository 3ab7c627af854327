//! The floor of one durable change in a redb store, for `./x bench-cfctl`:
//! a process that does nothing but open a store file, insert one key and
//! commit it the way cfctl's store commits (two-phase, with the allocator
//! state recorded, `quick_repair`), then exit without redb's close, as
//! cfctl does. No command line, no BPF, no planning: what any cfctl
//! command that changes the store pays at the least, whatever else it
//! does.
//!
//! `store_floor fill FILE COUNT`: a new store of COUNT random keys (so
//! that the file is as large as a listed store).
//! `store_floor add FILE KEY`: one durable insert.

use redb::{Database, TableDefinition};

const KEYS: TableDefinition<u64, u64> = TableDefinition::new("keys");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [action, file, number] = args.as_slice() else {
        return Err("usage: store_floor fill FILE COUNT | add FILE KEY".into());
    };
    let number: u64 = number.parse()?;
    let db = Database::create(file)?;
    let mut txn = db.begin_write()?;
    txn.set_quick_repair(true);
    {
        let mut keys = txn.open_table(KEYS)?;
        match action.as_str() {
            "fill" => {
                for n in 0..number {
                    // Spread over the key space, as addresses are.
                    keys.insert(n.wrapping_mul(0x9e37_79b9_7f4a_7c15), n)?;
                }
            }
            "add" => {
                keys.insert(number, number)?;
            }
            other => return Err(format!("unknown action {other}").into()),
        }
    }
    txn.commit()?;
    // As cfctl: the commit is durable and records the allocator state, so
    // redb's close (more flushes) is left out.
    std::mem::forget(db);
    Ok(())
}
