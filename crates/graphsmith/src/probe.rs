//! probe (todo)
