// Builds the embedded assets into static/: Tailwind's CSS for the classes the
// templ components and Go files use, and htmx with its SSE extension, copied
// from the pinned npm packages. Run with `npm run build` (go tool task ui).
import { copyFileSync, mkdirSync } from "node:fs";
import { execFileSync } from "node:child_process";

// The caniuse data in the lock file is what we build with; no nagging to update it.
process.env.BROWSERSLIST_IGNORE_OLD_DATA = "1";
mkdirSync("static", { recursive: true });
copyFileSync("node_modules/htmx.org/dist/htmx.min.js", "static/htmx.min.js");
copyFileSync("node_modules/htmx-ext-sse/dist/sse.min.js", "static/sse.js");
execFileSync("node_modules/.bin/tailwindcss", ["-c", "tailwind.config.js", "-i", "css/app.css", "-o", "static/app.css", "--minify"], { stdio: "inherit" });
