"""fastst's tests, laid out like the library's rooms (``helpers`` holds the code they share)."""
