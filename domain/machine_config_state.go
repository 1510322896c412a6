package domain

// What a machine's CONFIG shows (rezusctl get machines -o wide, the web UI).
const (
	// ConfigStateUpToDate : the machine holds its rendered config.
	ConfigStateUpToDate = "up to date"
	// ConfigStatePending : it does not yet; the config path has not applied
	// it (or has not recorded an outcome).
	ConfigStatePending = "pending"
	// ConfigStateFailed : applying or rendering its config failed; the
	// ConfigApplied condition names the cause.
	ConfigStateFailed = "failed"
)

// ConfigState says whether the machine holds its rendered config: up to date
// (configUpToDate), failed (ConfigApplied False; the condition is returned,
// with the reason and message to show) or pending.
func (s *MachineStatus) ConfigState() (string, *Condition) {
	c := FindCondition(s.Conditions, ConditionConfigApplied)
	switch {
	case s.ConfigUpToDate:
		return ConfigStateUpToDate, c
	case c != nil && c.Status == "False":
		return ConfigStateFailed, c
	}
	return ConfigStatePending, c
}
