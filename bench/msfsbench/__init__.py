"""msfs's benchmark harness: msfs beside mount-s3, s3fs, rclone and the raw S3 client (see
bench/README.md)."""
