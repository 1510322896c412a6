// Tailwind scans the templ components and the Go files that hold class lists.
module.exports = {
  content: ["./*.templ", "./*.go"],
  theme: { extend: {} },
  plugins: [],
};
