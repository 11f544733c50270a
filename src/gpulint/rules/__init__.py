"""gpulint rules: one module per rule, discovered by gpulint.rule.all_rules()."""
