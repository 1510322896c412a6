package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/rezuscloud/rezuscloud/domain"
)

func (r *rezusctl) editCommand() *cli.Command {
	return &cli.Command{
		Name:      "edit",
		Usage:     "edit an object in $EDITOR and save it back",
		ArgsUsage: "KIND NAME",
		Description: "The object is saved with the resourceVersion it was read at, so a change someone else made in\n" +
			"the meantime is never overwritten: the edit then fails, names the file holding your edits, and\n" +
			"can be run again on the current version. status is shown but not saved.\n\n" +
			"  EDITOR=nano rezusctl edit nodegroup workers -t acme",
		Flags:        []cli.Flag{tenantFlag()},
		BashComplete: completeKinds,
		Action:       r.edit,
	}
}

const editHeader = "# Edit the object below; lines starting with # are ignored. Save and quit to apply;\n" +
	"# an unchanged file cancels the edit. status is read-only.\n"

func (r *rezusctl) edit(c *cli.Context) error {
	s, cl, err := r.connect(c)
	if err != nil {
		return err
	}
	k, tenant, name, err := kindAndName(c, s)
	if err != nil {
		return err
	}
	it, err := getItem(c.Context, cl, k, tenant, name)
	if err != nil {
		return err
	}
	y, err := toYAML(it.Raw)
	if err != nil {
		return err
	}
	original := append([]byte(editHeader), y...)
	f, err := os.CreateTemp("", fmt.Sprintf("rezusctl-edit-%s-%s-*.yaml", k.Singular, name))
	if err != nil {
		return err
	}
	path := f.Name()
	_, werr := f.Write(original)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return werr
	}
	keep := false // the file is kept when it holds edits that were not saved
	defer func() {
		if !keep {
			os.Remove(path)
		}
	}()

	if err := r.runEditor(path); err != nil {
		return err
	}
	edited, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if bytes.Equal(edited, original) {
		fmt.Fprintln(r.env.Stdout, "edit cancelled, no changes made")
		return nil
	}
	keep = true
	docs, err := parseDocuments(bytes.NewReader(edited), path)
	if err != nil {
		return fmt.Errorf("%w\nyour edits are in %s", err, path)
	}
	if len(docs) != 1 {
		return fmt.Errorf("the edited file must hold exactly one object, it holds %d; your edits are in %s", len(docs), path)
	}
	d := docs[0]
	if rk, err := resolveKind(d.Kind); err != nil || rk.Kind != k.Kind || d.Name != name || (k.TenantScoped && d.Tenant != "" && d.Tenant != tenant) {
		return fmt.Errorf("kind, metadata.name and metadata.tenant cannot be changed by edit; your edits are in %s", path)
	}
	// The version read before editing goes back with the object: a write by
	// anyone else in between makes the server answer 409.
	body, err := d.setMeta(k.Kind, domain.APIVersion, map[string]any{"resourceVersion": it.Obj.Metadata.ResourceVersion})
	if err != nil {
		return err
	}
	var out domain.Object
	err = cl.call(c.Context, request{method: http.MethodPut, path: k.itemPath(tenant, name), body: body}, &out)
	switch {
	case isConflict(err):
		again := "rezusctl edit " + k.Singular + " " + name
		if k.TenantScoped {
			again += " -t " + tenant
		}
		//lint:ignore ST1005 the terminal shows this as it is: three sentences, the last an instruction
		return fmt.Errorf("%s was changed on the server while you were editing it, so your edit was not saved "+
			"(it was based on resourceVersion %s).\nYour edits are in %s.\nRun %q again to edit the current version.",
			k.ref(tenant, name), it.Obj.Metadata.ResourceVersion, path, again)
	case err != nil:
		var se *statusError
		if errors.As(err, &se) {
			printStatus(r.env.Stderr, se)
			fmt.Fprintf(r.env.Stderr, "your edits are in %s\n", path)
			return exitError{code: 1}
		}
		return fmt.Errorf("%w\nyour edits are in %s", err, path)
	}
	keep = false
	if out.Metadata.ResourceVersion == it.Obj.Metadata.ResourceVersion {
		fmt.Fprintf(r.env.Stdout, "%s/%s unchanged\n", k.Singular, name)
	} else {
		fmt.Fprintf(r.env.Stdout, "%s/%s edited\n", k.Singular, name)
	}
	return nil
}

// runEditor runs $EDITOR (default vi) on path through the shell, so EDITOR
// may carry arguments ("code --wait").
func (r *rezusctl) runEditor(path string) error {
	editor := strings.TrimSpace(r.env.Getenv("EDITOR"))
	if editor == "" {
		editor = "vi"
	}
	cmd := exec.Command("sh", "-c", editor+` "$1"`, "sh", path)
	cmd.Stdin = r.env.EditorIn
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if r.env.EditorOut != nil {
		cmd.Stdout, cmd.Stderr = r.env.EditorOut, r.env.Stderr
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %q failed: %w (nothing was saved)", editor, err)
	}
	return nil
}
