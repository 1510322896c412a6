// Package modulecheck is the module validator: a controller that runs
// `tofu validate` (through package tofu) on every module provider's module
// after each change of its spec and records the outcome as the Provider's
// Validated condition. The apply worker refuses a run that needs a module
// that failed it (domain.CheckModules).
package modulecheck
