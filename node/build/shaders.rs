pub fn build() {}
