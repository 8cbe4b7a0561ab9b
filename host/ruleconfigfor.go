package host

// RuleConfigFor returns the settings a Host with these Defaults and Rules
// (see Config) gives the rule file at path, zero fields set to their
// defaults: what tools that run rules outside a Host (ssrun test) apply.
func RuleConfigFor(defaults RuleConfig, rules map[string]RuleConfig, path string) RuleConfig {
	return ruleConfigFor(defaults, rules, path)
}

// Allowed reports whether key matches one of the permission patterns of a
// RuleConfig (Read, Write, Watch, Lock); a nil list allows every key.
func Allowed(patterns []string, key string) bool { return allowed(patterns, key) }
