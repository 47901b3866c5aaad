"""The scheduling model and policies every executor shares (DESIGN §2-5)."""
