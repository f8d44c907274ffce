"""msfs's benchmark harness: msfs beside s3fs, rclone and the raw S3 client (see bench/README.md)."""
