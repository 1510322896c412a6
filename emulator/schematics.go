package emulator

// The emulator's Image Factory: no factory is reachable here, so the
// emulator keeps the catalogue of schematics a factory would hold, filled
// through the factory's own API (POST /schematics on its HTTP handler, which
// RezusCloud's factory client speaks). An installer image that names a
// factory schematic (<host>/<variant>installer[-secureboot]/<id>:<version>)
// installs that schematic's extensions: a node reports them as Talos does,
// as COSI ExtensionStatus resources (`talosctl get extensions`), with the
// factory's "schematic" extension whose version is the ID. An upgrade to an
// installer of a schematic the catalogue lacks fails as a pull from the
// factory would: not found.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rezuscloud/rezuscloud/domain"
)

// maxSchematics bounds the catalogue.
const maxSchematics = 10000

// schematicsFile holds the catalogue in the state dir.
const schematicsFile = "schematics.json"

// AddSchematic puts a schematic in the catalogue, as POST /schematics of a
// factory does, and returns its ID (the factory's: of the schematic as
// given, in its order).
func (e *Emulator) AddSchematic(s domain.Schematic) (string, error) {
	id := s.ID()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.schematics == nil {
		e.schematics = map[string]domain.Schematic{}
	}
	if _, ok := e.schematics[id]; ok {
		return id, nil
	}
	if len(e.schematics) >= maxSchematics {
		return "", domain.NewInvalid("Schematic", id, []domain.Cause{{Type: domain.CauseTooLong, Message: fmt.Sprintf("the catalogue holds %d schematics, its most", maxSchematics)}})
	}
	e.schematics[id] = s
	if e.cfg.StateDir != "" {
		b, err := json.Marshal(e.schematics)
		if err != nil {
			return "", err
		}
		err = os.MkdirAll(e.cfg.StateDir, 0o700)
		if err == nil {
			err = writeAtomic(filepath.Join(e.cfg.StateDir, schematicsFile), b)
		}
		if err != nil {
			delete(e.schematics, id)
			return "", fmt.Errorf("persisting the schematic catalogue: %w", err)
		}
	}
	return id, nil
}

// lookupSchematic finds a schematic by ID; the vanilla one is always known.
func (e *Emulator) lookupSchematic(id string) (domain.Schematic, bool) {
	if id == domain.VanillaSchematic {
		return domain.Schematic{}, true
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	s, ok := e.schematics[id]
	return s, ok
}

// restoreSchematicsLocked reads the catalogue back from the state dir.
func (e *Emulator) restoreSchematicsLocked() error {
	b, err := os.ReadFile(filepath.Join(e.cfg.StateDir, schematicsFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &e.schematics); err != nil {
		return fmt.Errorf("reading %s: %w", schematicsFile, err)
	}
	return nil
}

// checkInstaller refuses an installer of a factory schematic the catalogue
// does not hold, as the factory's registry answers a pull of it.
func (e *Emulator) checkInstaller(image string) error {
	id := domain.SchematicOfImage(image)
	if id == "" {
		return nil
	}
	if _, ok := e.lookupSchematic(id); !ok {
		return status.Errorf(codes.NotFound, "pulling %s: not found: the image factory has no schematic %s", image, id)
	}
	return nil
}

// extensionFact is one extension a node reports.
type extensionFact struct {
	name, version, description string
}

// extensionsOf are the extensions a node installed from image runs: the
// schematic's official extensions, then the factory's "schematic" extension
// carrying the ID; none for an image that is not a factory installer. An
// extension's version is the emulator's (the factory picks the build that
// matches the Talos version, which no catalogue here holds).
func (e *Emulator) extensionsOf(image string) []extensionFact {
	id := domain.SchematicOfImage(image)
	if id == "" {
		return nil
	}
	var out []extensionFact
	if s, ok := e.lookupSchematic(id); ok {
		for _, x := range slices.Sorted(slices.Values(s.Extensions)) {
			_, name, _ := strings.Cut(x, "/")
			out = append(out, extensionFact{name: name, version: "emulated", description: x + " (emulated: from the schematic catalogue)"})
		}
	}
	return append(out, extensionFact{name: "schematic", version: id, description: "Image Factory schematic"})
}
